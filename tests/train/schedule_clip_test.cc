// Learning-rate schedules at their key steps, and the gradient-clipping coefficient.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/reduce.h"
#include "train/grad_clip.h"
#include "train/schedule.h"

namespace ms::train {
namespace {

// Peak 1e-3, floor 1e-4, 10 warm-up steps, 110 steps in all (100 of decay).
config::OptimConfig schedule(config::LrSchedule kind) {
  config::OptimConfig c;
  c.lr = 1e-3;
  c.min_lr = 1e-4;
  c.warmup_steps = 10;
  c.schedule = kind;
  return c;
}

TEST(Schedule, WarmUpRisesLinearlyFromZeroToThePeak) {
  const config::OptimConfig c = schedule(config::LrSchedule::kCosine);
  EXPECT_DOUBLE_EQ(learning_rate(c, 1, 110), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 5, 110), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 10, 110), 1e-3);
}

TEST(Schedule, CosineFallsToTheFloorAndStaysThere) {
  const config::OptimConfig c = schedule(config::LrSchedule::kCosine);
  // Quarter way: 1e-4 + 9e-4 * (1 + cos(pi/4)) / 2 = 8.681981e-4; half way: 5.5e-4.
  EXPECT_NEAR(learning_rate(c, 35, 110), 8.681980515e-4, 1e-12);
  EXPECT_NEAR(learning_rate(c, 60, 110), 5.5e-4, 1e-12);
  EXPECT_NEAR(learning_rate(c, 110, 110), 1e-4, 1e-12);
  EXPECT_NEAR(learning_rate(c, 500, 110), 1e-4, 1e-12);
}

TEST(Schedule, LinearFallsInAStraightLine) {
  const config::OptimConfig c = schedule(config::LrSchedule::kLinear);
  EXPECT_NEAR(learning_rate(c, 35, 110), 7.75e-4, 1e-12);
  EXPECT_NEAR(learning_rate(c, 60, 110), 5.5e-4, 1e-12);
  EXPECT_NEAR(learning_rate(c, 110, 110), 1e-4, 1e-12);
}

TEST(Schedule, ConstantHoldsThePeakAfterWarmUp) {
  const config::OptimConfig c = schedule(config::LrSchedule::kConstant);
  EXPECT_DOUBLE_EQ(learning_rate(c, 5, 110), 5e-4);
  EXPECT_DOUBLE_EQ(learning_rate(c, 11, 110), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(c, 110, 110), 1e-3);
}

TEST(Schedule, NoWarmUpDecaysFromThePeakAtOnce) {
  // Progress of step 1 is 1 / 101.
  config::OptimConfig c = schedule(config::LrSchedule::kCosine);
  c.warmup_steps = 0;
  EXPECT_NEAR(learning_rate(c, 1, 101), 1e-3 - 9e-4 * (1 - std::cos(M_PI / 101)) / 2, 1e-15);
  EXPECT_NEAR(learning_rate(c, 101, 101), 1e-4, 1e-12);
}

// The squared norm clipping uses (ops/reduce.h, called through the backend by the optimizer).
TEST(GradClip, SumOfSquaresAddsEveryElement) {
  const std::vector<float> g = {3.0f, -4.0f, 0.0f};
  EXPECT_DOUBLE_EQ(ops::sum_of_squares_f64(g.data(), g.size()), 25.0);
}

TEST(GradClip, CoefficientScalesLargeNormsDownToTheLimit) {
  EXPECT_DOUBLE_EQ(clip_coefficient(5.0, 1.0), 1.0 / (5.0 + 1e-6));
  EXPECT_DOUBLE_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_coefficient(1e9, 0.0), 1.0);  // clipping off
}

}  // namespace
}  // namespace ms::train
