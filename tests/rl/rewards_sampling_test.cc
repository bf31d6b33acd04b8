// Built-in rewards, DAPO's overlong shaping table and dynamic sampling's batch filling and
// bound.
#include <gtest/gtest.h>

#include <vector>

#include "rl/dynamic_sampling.h"
#include "rl/rewards.h"

namespace ms::rl {
namespace {

TEST(Rewards, AnswerMatchReadsTheFirstInteger) {
  EXPECT_TRUE(*answer_matches(" Mia has 34 plums.", "34"));
  EXPECT_FALSE(*answer_matches(" Mia has 35 plums.", "34"));
  EXPECT_FALSE(*answer_matches(" Mia has plums.", "34"));
  EXPECT_TRUE(*answer_matches("-7", "-7"));
  EXPECT_TRUE(*answer_matches("x 034 then 5", "34"));
  EXPECT_FALSE(*answer_matches("34", "-34"));
  // Only the first number counts: a response listing candidates does not score.
  EXPECT_FALSE(*answer_matches("33 or 34", "34"));
  EXPECT_FALSE(answer_matches("34", "thirty-four").ok());
  EXPECT_FALSE(answer_matches("34", "").ok());
  EXPECT_EQ(first_integer("a-b-3c"), -3);
  EXPECT_EQ(first_integer("99999999999999999999"), std::nullopt);
}

TEST(Rewards, FormatCheck) {
  EXPECT_TRUE(format_ok(" Mia has 34 plums."));
  EXPECT_TRUE(format_ok("34.\n"));
  EXPECT_FALSE(format_ok(" Mia has 34 plums"));          // no period
  EXPECT_FALSE(format_ok(" Mia has 34 plums. Then 3."));  // two sentences
  EXPECT_FALSE(format_ok(" Mia has plums."));            // no number
  EXPECT_FALSE(format_ok(" 3 and 4."));                  // two numbers
  EXPECT_FALSE(format_ok(""));
}

TEST(OverlongShaping, Table) {
  // max_len 20, cache_len 8: free up to 12 tokens, then -1/8 per token down to -1 at 20.
  const std::vector<std::pair<int64_t, double>> table = {
      {0, 0.0}, {12, 0.0}, {13, -0.125}, {16, -0.5}, {19, -0.875}, {20, -1.0}, {25, -1.0}};
  for (const auto& [length, penalty] : table) {
    Result<double> got = overlong_penalty(length, 20, 8);
    ASSERT_TRUE(got.ok());
    EXPECT_DOUBLE_EQ(*got, penalty) << "length " << length;
  }
  EXPECT_DOUBLE_EQ(*overlong_penalty(4, 4, 4), 0.0 - 1.0);
  EXPECT_FALSE(overlong_penalty(3, 20, 0).ok());
  EXPECT_FALSE(overlong_penalty(3, 20, 21).ok());
}

using Groups = std::vector<std::vector<double>>;

TEST(DynamicSampling, DropsUniformGroupsAndFillsAcrossRounds) {
  // Round 0: two uniform, one varied; round 1: one varied, one uniform, two varied.
  const std::vector<Groups> rounds = {
      {{1, 1, 1}, {0, 1, 0}, {0, 0, 0}},
      {{1, 0, 0}, {0.5, 0.5, 0.5}, {0, 0, 1}, {1, 1, 0}},
  };
  int64_t calls = 0;
  Result<FilledBatch> r = fill_batch(3, 4, true, "rl.dynamic_sampling.max_rounds",
                                     [&](int64_t round) -> Result<Groups> {
                                       ++calls;
                                       return rounds[static_cast<size_t>(round)];
                                     });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r->rounds, 2);
  ASSERT_EQ(r->kept.size(), 3u);
  EXPECT_EQ(r->kept[0].round, 0);
  EXPECT_EQ(r->kept[0].index, 1);
  EXPECT_EQ(r->kept[1].round, 1);
  EXPECT_EQ(r->kept[1].index, 0);
  EXPECT_EQ(r->kept[2].index, 2);
  EXPECT_EQ(r->dropped, 3);
  EXPECT_EQ(r->surplus, 1);
}

TEST(DynamicSampling, WithoutFilterKeepsEverythingInOneRound) {
  Result<FilledBatch> r = fill_batch(2, 1, false, "bound", [](int64_t) -> Result<Groups> {
    return Groups{{1, 1}, {0, 0}};
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kept.size(), 2u);
  EXPECT_EQ(r->dropped, 0);
}

TEST(DynamicSampling, ErrorNamesTheBound) {
  int64_t calls = 0;
  Result<FilledBatch> r = fill_batch(4, 3, true, "rl.dynamic_sampling.max_rounds",
                                     [&](int64_t) -> Result<Groups> {
                                       ++calls;
                                       return Groups{{1, 1, 1, 1}, {1, 0, 1, 1}};
                                     });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("3 of 4 groups"), std::string::npos) << m;
  EXPECT_NE(m.find("after 3 generation rounds"), std::string::npos) << m;
  EXPECT_NE(m.find("rl.dynamic_sampling.max_rounds = 3"), std::string::npos) << m;
}

TEST(DynamicSampling, PassesGenerationErrorsOn) {
  Result<FilledBatch> r = fill_batch(1, 3, true, "bound", [](int64_t) -> Result<Groups> {
    return Internal("engine failed");
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "engine failed");
}

}  // namespace
}  // namespace ms::rl
