// Median, MAD and robust z-scores, including the MAD == 0 edge cases the verdicts rely on.
#include "diag/robust_stats.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace ms::diag {
namespace {

TEST(RobustStats, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(median(std::vector<double>{3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median(std::vector<double>{}), 0);
}

TEST(RobustStats, MadIgnoresOneWildValue) {
  const std::vector<double> values{10, 11, 9, 10, 1000};
  EXPECT_DOUBLE_EQ(median(values), 10);
  EXPECT_DOUBLE_EQ(median_absolute_deviation(values), 1);
}

TEST(RobustStats, RobustZUsesTheNormalConsistencyScale) {
  EXPECT_DOUBLE_EQ(robust_z(12, 10, 1), 2 * kRobustZScale);
  EXPECT_DOUBLE_EQ(robust_z(8, 10, 1), -2 * kRobustZScale);
}

TEST(RobustStats, ZeroMadMakesAnyDepartureInfinite) {
  EXPECT_EQ(robust_z(10, 10, 0), 0);
  EXPECT_TRUE(std::isinf(robust_z(9, 10, 0)));
  EXPECT_LT(robust_z(9, 10, 0), 0);
  EXPECT_GT(robust_z(11, 10, 0), 0);
}

TEST(RobustStats, ScoresOfAPopulation) {
  const std::vector<double> z = robust_z_scores(std::vector<double>{5, 5, 5, 1});
  EXPECT_EQ(z[0], 0);
  EXPECT_TRUE(std::isinf(z[3]) && z[3] < 0);
}

}  // namespace
}  // namespace ms::diag
