// The pure side of --validate (issue 50, item 3): which candidates train, a run's measured step
// from its step times, and the verdict against the recommendation.
#include "plan/validate.h"

#include <gtest/gtest.h>

namespace ms::plan {
namespace {

Prediction at(int dp, int tp, bool zero, double step_s) {
  Prediction p;
  p.layout.dp = dp;
  p.layout.tp = tp;
  p.layout.zero = zero;
  p.step_s = step_s;
  return p;
}

TEST(Validate, CandidatesStartWithTheRecommendationAndSkipNearCopies) {
  SearchResult r;
  r.ranked = {at(2, 1, true, 1.0), at(2, 1, false, 1.01), at(1, 2, true, 1.02),
              at(1, 2, false, 1.03), at(4, 1, true, 1.1)};
  r.recommendation.index = 2;
  // The recommendation (index 2), then 0; 1 is 0 with ZeRO off and 3 is 2 with ZeRO off.
  EXPECT_EQ(validation_candidates(r, 3), (std::vector<size_t>{2, 0, 4}));
  EXPECT_EQ(validation_candidates(r, 1), (std::vector<size_t>{2}));
  EXPECT_EQ(validation_candidates(r, 10), (std::vector<size_t>{2, 0, 4}));
  EXPECT_TRUE(validation_candidates(SearchResult{}, 3).empty());
}

TEST(Validate, TheMeasuredStepIsTheMedianAfterTheFirst) {
  // Step 1 (warm-up, 9 s) is left out; the rest in any order: median of 1, 2, 3.
  Result<double> s = measured_step_seconds({{3, 2.0}, {1, 9.0}, {2, 1.0}, {4, 3.0}});
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(*s, 2.0);
  Result<double> even = measured_step_seconds({{1, 9.0}, {2, 1.0}, {3, 2.0}});
  ASSERT_TRUE(even.ok());
  EXPECT_DOUBLE_EQ(*even, 1.5);
  Result<double> one = measured_step_seconds({{1, 4.0}});
  ASSERT_TRUE(one.ok());
  EXPECT_DOUBLE_EQ(*one, 4.0);
  EXPECT_FALSE(measured_step_seconds({}).ok());
}

TEST(Validate, TheVerdictSaysWhetherTheRecommendationWasFastest) {
  const std::vector<ValidatedLayout> won = {{at(2, 1, true, 1.0), 1.0}, {at(1, 2, true, 1.1), 1.2}};
  EXPECT_NE(validation_text(won, 5).find("the recommendation (*) was the fastest measured, 20.0% "
                                         "ahead of the next"),
            std::string::npos)
      << validation_text(won, 5);
  const std::vector<ValidatedLayout> lost = {{at(2, 1, true, 1.0), 1.5}, {at(1, 2, true, 1.1), 1.2},
                                             {at(4, 1, true, 1.2), 1.3}};
  const std::string text = validation_text(lost, 5);
  EXPECT_NE(text.find("the fastest measured was dp1 tp2 pp1 mb1 zero1 (1.2 s); the recommendation "
                      "(*) measured 25.0% slower, 3 of 3"),
            std::string::npos)
      << text;
  const nlohmann::ordered_json j = validation_json(lost, 5);
  EXPECT_EQ(j["recommended_measured_rank"], 3);
  EXPECT_EQ(j["runs"][1]["measured_rank"], 1);
  EXPECT_EQ(j["fastest"], "dp1 tp2 pp1 mb1 zero1");
  EXPECT_NEAR(j["recommended_slower_than_fastest"].get<double>(), 0.25, 1e-12);
}

}  // namespace
}  // namespace ms::plan
