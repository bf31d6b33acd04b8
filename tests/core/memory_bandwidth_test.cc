// The STREAM probe: byte counting and the empty case (no timing thresholds: a loaded machine
// may be arbitrarily slow, but never infinitely fast or negative).
#include "core/memory_bandwidth.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ms {
namespace {

TEST(MemoryBandwidth, EmptyArraysMeasureNothing) {
  EXPECT_EQ(measure_stream_gbs(StreamKernel::kCopy, 0, 3), 0.0);
  EXPECT_EQ(measure_stream_gbs(StreamKernel::kTriad, 0, 3), 0.0);
}

TEST(MemoryBandwidth, BothKernelsGiveAFinitePositiveRate) {
  for (StreamKernel k : {StreamKernel::kCopy, StreamKernel::kTriad}) {
    const double gbs = measure_stream_gbs(k, 1 << 16, 2);
    EXPECT_TRUE(std::isfinite(gbs) && gbs > 0) << gbs;
  }
}

}  // namespace
}  // namespace ms
