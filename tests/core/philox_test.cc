// Philox4x32-10 and the (seed, stream, index) draws built on it.
#include "core/philox.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace ms {
namespace {

// Known-answer vectors published with Random123 (kat_vectors, philox4x32_10).
TEST(Philox, MatchesTheRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, BlockKeyingPutsSeedInTheKeyAndBlockAndStreamInTheCounter) {
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t stream = 0x0370734413198a2eull;
  const uint64_t block = 0x85a308d3243f6a88ull;
  EXPECT_EQ(philox_block(seed, stream, block),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, UniformIsTheTop24BitsOfItsLane) {
  const PhiloxCounter words = philox_block(0, 0, 0);
  for (uint64_t lane = 0; lane < 4; ++lane) {
    EXPECT_EQ(uniform(0, 0, lane), static_cast<float>(words[lane] >> 8) / 16777216.0f);
  }
}

TEST(Philox, DrawsDependOnlyOnSeedStreamAndIndex) {
  EXPECT_EQ(uniform(1, 2, 3), uniform(1, 2, 3));
  EXPECT_NE(uniform(1, 2, 3), uniform(1, 2, 4));
  EXPECT_NE(uniform(1, 2, 3), uniform(1, 3, 3));
  EXPECT_NE(uniform(1, 2, 3), uniform(2, 2, 3));
  EXPECT_EQ(normal(7, 8, 9), normal(7, 8, 9));
}

TEST(Philox, BulkFillsEqualScalarDrawsAtAnyOffset) {
  for (uint64_t first : {0ull, 1ull, 3ull, 4ull, 1000001ull}) {
    std::vector<float> u(11), n(11);
    fill_uniform(u, 42, 5, first, -2.0f, 3.0f);
    fill_normal(n, 42, 5, first, 1.0f, 0.5f);
    for (size_t i = 0; i < u.size(); ++i) {
      EXPECT_EQ(u[i], -2.0f + 5.0f * uniform(42, 5, first + i)) << first << " " << i;
      EXPECT_EQ(n[i], 1.0f + 0.5f * normal(42, 5, first + i)) << first << " " << i;
    }
  }
}

TEST(Philox, FillingAGlobalTensorInShardsEqualsFillingItWhole) {
  const uint64_t seed = 1234, stream = stream_id("layers.0.attn.wq");
  std::vector<float> whole(1001), shards(1001);
  fill_normal(whole, seed, stream, 0, 0.0f, 0.02f);
  // Two ranks with an odd split point, each drawing only its own slice.
  fill_normal(std::span(shards).subspan(0, 333), seed, stream, 0, 0.0f, 0.02f);
  fill_normal(std::span(shards).subspan(333), seed, stream, 333, 0.0f, 0.02f);
  EXPECT_EQ(whole, shards);
  fill_uniform(whole, seed, stream, 0, -1.0f, 1.0f);
  fill_uniform(std::span(shards).subspan(0, 502), seed, stream, 0, -1.0f, 1.0f);
  fill_uniform(std::span(shards).subspan(502), seed, stream, 502, -1.0f, 1.0f);
  EXPECT_EQ(whole, shards);
}

struct Moments {
  double mean = 0;
  double variance = 0;
};

Moments moments(const std::vector<float>& x) {
  Moments m;
  for (float v : x) m.mean += v;
  m.mean /= static_cast<double>(x.size());
  for (float v : x) m.variance += (v - m.mean) * (v - m.mean);
  m.variance /= static_cast<double>(x.size());
  return m;
}

TEST(Philox, UniformDrawsLookUniform) {
  std::vector<float> u(100000);
  fill_uniform(u, 99, stream_id("stats"), 0, 0.0f, 1.0f);
  for (float v : u) ASSERT_TRUE(v >= 0.0f && v < 1.0f) << v;
  const Moments m = moments(u);
  EXPECT_NEAR(m.mean, 0.5, 0.01);
  EXPECT_NEAR(m.variance, 1.0 / 12.0, 0.005);
}

TEST(Philox, NormalDrawsLookStandardNormal) {
  std::vector<float> n(100000);
  fill_normal(n, 99, stream_id("stats"), 0, 0.0f, 1.0f);
  for (float v : n) ASSERT_TRUE(std::isfinite(v));
  const Moments m = moments(n);
  EXPECT_NEAR(m.mean, 0.0, 0.02);
  EXPECT_NEAR(m.variance, 1.0, 0.03);
  size_t within_one = 0;
  for (float v : n) within_one += std::fabs(v) < 1.0f;
  EXPECT_NEAR(static_cast<double>(within_one) / n.size(), 0.6827, 0.01);
}

TEST(StreamId, IsFnv1a64) {
  EXPECT_EQ(stream_id(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(stream_id("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(stream_id("foobar"), 0x85944171f73967e8ull);
  EXPECT_NE(stream_id("layers.0.wq"), stream_id("layers.0.wk"));
}

}  // namespace
}  // namespace ms
