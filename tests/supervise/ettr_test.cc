#include "supervise/ettr.h"

#include <gtest/gtest.h>

namespace ms::supervise {
namespace {

TEST(EttrTest, KeptStepsOverWallTime) {
  // Attempt 1 runs steps 1-4 (1 s each) and dies; attempt 2 resumes after step 2.
  std::vector<StepTiming> steps = {{1, 1, 101, 1}, {1, 2, 102, 1}, {1, 3, 103, 1}, {1, 4, 104, 1},
                                   {2, 3, 110, 0.5}, {2, 4, 111, 0.5}, {2, 5, 112, 0.5}};
  const std::vector<IncidentTiming> incidents = {{1, 104, 106, 4}};
  const EttrReport r = compute_ettr(steps, incidents, 100, 112);
  EXPECT_EQ(r.steps, 5);
  // Steps 1, 2 from attempt 1 (2 s), 3, 4, 5 from attempt 2 (1.5 s): the redone ones once.
  EXPECT_DOUBLE_EQ(r.productive_s, 3.5);
  EXPECT_DOUBLE_EQ(r.wall_s, 12);
  EXPECT_DOUBLE_EQ(r.ettr, 3.5 / 12);
  ASSERT_EQ(r.incidents.size(), 1u);
  EXPECT_DOUBLE_EQ(r.incidents[0].detect_s, 2);
  EXPECT_DOUBLE_EQ(r.incidents[0].recover_s, 6);   // to step 3 of attempt 2
  EXPECT_DOUBLE_EQ(r.incidents[0].regain_s, 8);    // to step 5, past the lost step 4
  EXPECT_EQ(r.incidents[0].resumed_from, 2);
  EXPECT_EQ(r.incidents[0].lost_steps, 2);
}

TEST(EttrTest, AnIncidentNoAttemptRecoveredFrom) {
  const EttrReport r = compute_ettr({{1, 1, 101, 1}}, {{1, 101, 105, 1}}, 100, 105);
  ASSERT_EQ(r.incidents.size(), 1u);
  EXPECT_EQ(r.incidents[0].recover_s, -1);
  EXPECT_EQ(r.incidents[0].regain_s, -1);
  EXPECT_DOUBLE_EQ(r.ettr, 0.2);
}

}  // namespace
}  // namespace ms::supervise
