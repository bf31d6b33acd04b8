// Timers: monotonic stopwatch, wall clock in Unix seconds, scoped phase accounting. Only
// orderings are asserted, never durations.
#include "core/timer.h"

#include <gtest/gtest.h>

namespace ms {
namespace {

TEST(Timer, WallTimeIsSecondsSinceTheUnixEpoch) {
  const double t = wall_time_s();
  EXPECT_GT(t, 1.6e9);  // after 2020
  EXPECT_LT(t, 4.1e9);  // before 2100
}

TEST(Timer, StopwatchNeverGoesBackwards) {
  Stopwatch w;
  const double a = w.elapsed_s();
  const double b = w.elapsed_s();
  EXPECT_GE(a, 0.0);
  EXPECT_GE(b, a);
  const double lap = w.lap_s();
  EXPECT_GE(lap, b);
  EXPECT_GE(w.elapsed_s(), 0.0);
}

TEST(Timer, ScopedTimerAccumulates) {
  double total = 1.0;
  { ScopedTimer t(total); }
  EXPECT_GE(total, 1.0);
  const double after_first = total;
  { ScopedTimer t(total); }
  EXPECT_GE(total, after_first);
}

}  // namespace
}  // namespace ms
