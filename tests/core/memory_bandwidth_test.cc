// The STREAM and read probes: the empty cases and finite rates (no timing thresholds: a loaded machine
// may be arbitrarily slow, but never infinitely fast or negative).
#include "core/memory_bandwidth.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

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

TEST(MemoryBandwidth, ReadProbeMeasuresNothingBelowALinePerThread) {
  EXPECT_EQ(measure_read_gbs(0, 1, 3), 0.0);
  EXPECT_EQ(measure_read_gbs(63, 1, 3), 0.0);
  EXPECT_EQ(measure_read_gbs(3 * 64, 4, 3), 0.0);
}

TEST(MemoryBandwidth, ReadProbeGivesAFinitePositiveRateOnEveryThreadCount) {
  // Slices of unequal and single lines included: 1000 lines over 3 threads, 3 over 3.
  for (const auto& [bytes, threads] :
       {std::pair<size_t, int>{64000, 1}, {64000, 3}, {192, 3}, {1 << 20, 2}}) {
    const double gbs = measure_read_gbs(bytes, threads, 2);
    EXPECT_TRUE(std::isfinite(gbs) && gbs > 0) << bytes << " bytes, " << threads << " threads";
  }
}

TEST(MemoryBandwidth, AKeptProbeAccumulatesItsPassesBestAndWorst) {
  ReadProbe probe(64 * 1000 + 17, 2);
  EXPECT_EQ(probe.bytes(), 64u * 1000);
  EXPECT_EQ(probe.passes(), 0);
  EXPECT_EQ(probe.best_gbs(), 0.0);
  const double first = probe.run(3);
  const double second = probe.run(2);
  EXPECT_EQ(probe.passes(), 5);
  EXPECT_TRUE(std::isfinite(first) && first > 0 && std::isfinite(second) && second > 0);
  EXPECT_EQ(probe.best_gbs(), std::max(first, second));
  EXPECT_GT(probe.worst_gbs(), 0.0);
  EXPECT_LE(probe.worst_gbs(), std::min(first, second));

  ReadProbe too_small(3 * 64, 4);
  EXPECT_EQ(too_small.run(2), 0.0);
  EXPECT_EQ(too_small.passes(), 0);
}

TEST(MemoryBandwidth, ReadBytesReadsEveryByteAtAnyAlignmentAndLength) {
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7 + 3);
  EXPECT_EQ(read_bytes(bytes.data() + 17, 0), 0u);
  // Unaligned starts, bodies of whole lines and tails: a change to any one byte of the range,
  // and none outside it, changes the result.
  for (const auto& [begin, length] : {std::pair<size_t, size_t>{0, 1000}, {1, 999}, {5, 130},
                                      {3, 9}, {64, 256}}) {
    const uint64_t before = read_bytes(bytes.data() + begin, length);
    for (size_t i = begin; i < begin + length; ++i) {
      bytes[i] ^= 0x10;
      EXPECT_NE(read_bytes(bytes.data() + begin, length), before) << begin << " + " << i;
      bytes[i] ^= 0x10;
    }
    if (begin > 0) {
      bytes[begin - 1] ^= 0x10;
      EXPECT_EQ(read_bytes(bytes.data() + begin, length), before) << begin;
      bytes[begin - 1] ^= 0x10;
    }
  }
}

TEST(MemoryBandwidth, LastLevelCacheSizeIsZeroOrAPlausibleCache) {
  const size_t llc = last_level_cache_bytes();
  EXPECT_TRUE(llc == 0 || (llc >= 64 * 1024 && llc <= (size_t{4} << 30))) << llc;
}

}  // namespace
}  // namespace ms
