// The loss-spike guard: when it skips an update, when it must not, and its checkpoint state.
#include "train/spike_guard.h"

#include <gtest/gtest.h>

namespace ms::train {
namespace {

config::SpikeGuardConfig guard_config(int64_t window, double zscore) {
  config::SpikeGuardConfig c;
  c.window = window;
  c.zscore = zscore;
  return c;
}

// Losses 1.0, 1.1, 0.9, 1.0: mean 1.0, standard deviation sqrt(0.005) = 0.0707.
SpikeGuard filled_guard() {
  SpikeGuard guard(guard_config(4, 3.0));
  for (const double loss : {1.0, 1.1, 0.9, 1.0}) guard.accept(loss, 2.0 + loss);
  return guard;
}

TEST(SpikeGuard, SkipsALossMoreThanZscoreDeviationsAboveTheMean) {
  const SpikeGuard guard = filled_guard();
  const SpikeVerdict spike = guard.check(1.3, 3.0);  // z = 0.3 / 0.0707 = 4.24
  EXPECT_TRUE(spike.skip);
  EXPECT_EQ(spike.metric, "loss");
  EXPECT_NEAR(spike.z, 4.2426, 1e-3);
  EXPECT_NEAR(spike.mean, 1.0, 1e-12);
  EXPECT_NE(spike.describe(4).find("loss 1.3 is 4.2 standard deviations"), std::string::npos);
}

TEST(SpikeGuard, AcceptsValuesWithinTheBandAndDrops) {
  const SpikeGuard guard = filled_guard();
  EXPECT_FALSE(guard.check(1.1, 3.0).skip);   // z = 1.41
  EXPECT_FALSE(guard.check(0.2, 3.0).skip);   // far below: improvements never skip
}

TEST(SpikeGuard, SkipsAGradientNormSpikeToo) {
  const SpikeGuard guard = filled_guard();
  const SpikeVerdict spike = guard.check(1.0, 30.0);
  EXPECT_TRUE(spike.skip);
  EXPECT_EQ(spike.metric, "grad_norm");
}

TEST(SpikeGuard, WaitsForAFullWindow) {
  SpikeGuard guard(guard_config(4, 3.0));
  for (const double loss : {1.0, 1.1, 0.9}) guard.accept(loss, 1.0);
  EXPECT_FALSE(guard.check(100.0, 100.0).skip);
}

TEST(SpikeGuard, DisabledNeverSkips) {
  config::SpikeGuardConfig c = guard_config(2, 1.0);
  c.enabled = false;
  SpikeGuard guard(c);
  guard.accept(1.0, 1.0);
  guard.accept(1.0, 1.0);
  EXPECT_FALSE(guard.check(100.0, 100.0).skip);
}

TEST(SpikeGuard, AFlatWindowStillCatchesAJump) {
  SpikeGuard guard(guard_config(3, 6.0));
  for (int i = 0; i < 3; ++i) guard.accept(2.0, 1.0);
  EXPECT_FALSE(guard.check(2.0, 1.0).skip);
  EXPECT_TRUE(guard.check(2.5, 1.0).skip);
}

TEST(SpikeGuard, WindowSlidesOverTheNewestAcceptedSteps) {
  SpikeGuard guard(guard_config(2, 3.0));
  for (const double loss : {100.0, 1.0, 1.2}) guard.accept(loss, 1.0);
  const SpikeGuardState s = guard.state();
  EXPECT_EQ(s.losses, (std::vector<double>{1.0, 1.2}));
}

// Skipped steps leave the weights (and so the next steps' statistics) where they were: after
// kMaxConsecutiveSkips skips in a row the next flagged step is applied, enters the window and
// ends the run of skips.
TEST(SpikeGuard, GivesWayAfterConsecutiveSkips) {
  SpikeGuard guard = filled_guard();
  for (int64_t i = 0; i < SpikeGuard::kMaxConsecutiveSkips; ++i) {
    const SpikeVerdict v = guard.check(1.5, 3.0);
    ASSERT_TRUE(v.skip) << i;
    EXPECT_FALSE(v.gave_way);
    guard.record_skip();
  }
  EXPECT_EQ(guard.state().consecutive, SpikeGuard::kMaxConsecutiveSkips);
  const SpikeVerdict level = guard.check(1.5, 3.0);
  EXPECT_FALSE(level.skip);
  EXPECT_TRUE(level.gave_way);
  EXPECT_EQ(level.metric, "loss");
  guard.accept(1.5, 3.0);
  EXPECT_EQ(guard.state().consecutive, 0);
  EXPECT_EQ(guard.state().skipped, SpikeGuard::kMaxConsecutiveSkips);
  EXPECT_EQ(guard.state().losses.back(), 1.5);
  // A step within the band resets the run too: one skip, one accepted, and the count restarts.
  SpikeGuard other = filled_guard();
  ASSERT_TRUE(other.check(1.5, 3.0).skip);
  other.record_skip();
  other.accept(1.0, 3.0);
  EXPECT_EQ(other.state().consecutive, 0);
}

TEST(SpikeGuard, StateRoundTripsAndGivesTheSameVerdicts) {
  SpikeGuard guard = filled_guard();
  guard.record_skip();
  const SpikeGuardState saved = guard.state();
  EXPECT_EQ(saved.skipped, 1);
  SpikeGuard restored(guard_config(4, 3.0));
  restored.restore(saved);
  EXPECT_EQ(restored.state(), saved);
  EXPECT_EQ(restored.check(1.3, 3.0).skip, guard.check(1.3, 3.0).skip);
}

}  // namespace
}  // namespace ms::train
