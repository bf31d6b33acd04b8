// The wire quantizer of compressed data parallelism: nearest rounding within half a step of
// every value, stochastic rounding unbiased over many keys, exact message sizes (odd int4 tails,
// raw runs), what each value lost as the decoder forms it, raw runs bit-exact, non-finite groups
// poisoned, and the Hadamard transform orthonormal and its own inverse.
#include "parallel/wire_quant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ms::parallel {
namespace {

std::vector<float> random_values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<float> round_trip(const std::vector<float>& x, const std::vector<WireRun>& runs,
                              const WireQuant& q, uint64_t key) {
  std::vector<uint8_t> wire(static_cast<size_t>(message_bytes(runs, q)));
  encode_message(x.data(), runs, q, key, wire.data());
  std::vector<float> out(x.size(), 0.0f);
  decode_message(wire.data(), runs, q, out.data(), Decode::kSet);
  return out;
}

// The scale a group of values gets: max |x| / qmax.
float group_scale(const float* x, int64_t n, int bits) {
  float amax = 0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax / (bits == 8 ? 127.0f : 7.0f);
}

class WireQuantBits : public ::testing::TestWithParam<int> {};

TEST_P(WireQuantBits, NearestRoundingIsWithinHalfAStep) {
  const int bits = GetParam();
  const WireQuant q{bits, 64, false};
  const int64_t n = 64 * 5 + 17;  // a short last group
  const std::vector<float> x = random_values(n, 7);
  const std::vector<float> y = round_trip(x, {{0, n, true}}, q, 1);
  for (int64_t g = 0; g < n; g += 64) {
    const int64_t len = std::min<int64_t>(64, n - g);
    const float s = group_scale(&x[g], len, bits);
    for (int64_t i = g; i < g + len; ++i) {
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * s * (1 + 1e-5f) + 1e-7f) << "value " << i;
    }
  }
}

TEST_P(WireQuantBits, StochasticRoundingIsUnbiased) {
  const int bits = GetParam();
  const WireQuant q{bits, 32, true};
  const int64_t n = 32;
  std::vector<float> x = random_values(n, 11);
  const float s = group_scale(x.data(), n, bits);
  std::vector<double> mean(static_cast<size_t>(n), 0.0);
  constexpr int kDraws = 4000;
  for (int k = 0; k < kDraws; ++k) {
    const std::vector<float> y = round_trip(x, {{0, n, true}}, q, rounding_key({3, 5, 7, 0, 0,
                                                                               uint64_t(k)}));
    for (int64_t i = 0; i < n; ++i) {
      // Each draw is one of the two codes around x / s.
      EXPECT_LE(std::fabs(y[i] - x[i]), s * (1 + 1e-5f));
      mean[i] += y[i] / kDraws;
    }
  }
  // Each draw's error is at most s with variance at most s^2 / 4: the mean of 4000 draws lies
  // within 5 standard deviations, s / 2 * 5 / sqrt(4000), of x when rounding is unbiased.
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_NEAR(mean[i], x[i], 5.0 * 0.5 * s / std::sqrt(double(kDraws))) << "value " << i;
  }
}

TEST_P(WireQuantBits, SameKeySameBytesOtherKeyOtherBytes) {
  const WireQuant q{GetParam(), 128, true};
  const std::vector<float> x = random_values(1000, 5);
  const std::vector<WireRun> runs{{0, 1000, true}};
  std::vector<uint8_t> a(static_cast<size_t>(message_bytes(runs, q))), b(a.size()), c(a.size());
  encode_message(x.data(), runs, q, 42, a.data());
  encode_message(x.data(), runs, q, 42, b.data());
  encode_message(x.data(), runs, q, 43, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

TEST_P(WireQuantBits, LostIsTheValueLessWhatTheDecoderForms) {
  const WireQuant q{GetParam(), 50, true};
  const std::vector<float> x = random_values(301, 12);
  const std::vector<WireRun> runs{{0, 11, false}, {11, 257, true}, {268, 33, false}};
  std::vector<uint8_t> wire(static_cast<size_t>(message_bytes(runs, q)));
  std::vector<float> lost(x.size(), -1.0f);
  encode_message(x.data(), runs, q, 77, wire.data(), lost.data());
  std::vector<uint8_t> again(wire.size());
  encode_message(x.data(), runs, q, 77, again.data());
  EXPECT_EQ(wire, again);  // asking for what was lost does not change the message
  const std::vector<float> y = round_trip(x, runs, q, 77);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(lost[i], x[i] - y[i]) << "value " << i;
}

INSTANTIATE_TEST_SUITE_P(Bits, WireQuantBits, ::testing::Values(8, 4));

TEST(WireQuant, MessageBytesAreExact) {
  // int8: a 4-byte scale and one byte a value per group; int4: two values a byte, rounded up.
  EXPECT_EQ(quantized_bytes(2048, {8, 2048, true}), 4 + 2048);
  EXPECT_EQ(quantized_bytes(2049, {8, 2048, true}), 4 + 2048 + 4 + 1);
  EXPECT_EQ(quantized_bytes(2048, {4, 2048, true}), 4 + 1024);
  EXPECT_EQ(quantized_bytes(101, {4, 50, true}), 3 * 4 + 25 + 25 + 1);
  EXPECT_EQ(quantized_bytes(0, {4, 50, true}), 0);
  const std::vector<WireRun> runs{{0, 10, false}, {10, 100, true}, {110, 3, false}};
  EXPECT_EQ(message_bytes(runs, {4, 64, true}), 10 * 4 + (2 * 4 + 32 + 18) + 3 * 4);
}

TEST(WireQuant, RawRunsAreExactAndQuantizedRunsAreCloseInOneMessage) {
  const WireQuant q{4, 16, false};
  const std::vector<float> x = random_values(90, 9);
  const std::vector<WireRun> runs{{0, 7, false}, {7, 60, true}, {67, 23, false}};
  const std::vector<float> y = round_trip(x, runs, q, 0);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(y[i], x[i]);
  for (int64_t i = 67; i < 90; ++i) EXPECT_EQ(y[i], x[i]);
  for (int64_t i = 7; i < 67; ++i) EXPECT_NEAR(y[i], x[i], 0.5f);
}

TEST(WireQuant, DecodeModesAddAndSet) {
  const WireQuant q{8, 8, false};
  const std::vector<float> x{1, 2, 3, 4, -4, -3, -2, -1, 9, 10};
  const std::vector<WireRun> runs{{0, 8, true}, {8, 2, false}};
  std::vector<uint8_t> wire(static_cast<size_t>(message_bytes(runs, q)));
  encode_message(x.data(), runs, q, 0, wire.data());
  std::vector<float> dst(10, 100.0f);
  decode_message(wire.data(), runs, q, dst.data(), Decode::kAddQuantizedSetRaw);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(dst[i], 100.0f + x[i], 0.02f);
  EXPECT_EQ(dst[8], 9.0f);
  EXPECT_EQ(dst[9], 10.0f);
  std::fill(dst.begin(), dst.end(), 100.0f);
  decode_message(wire.data(), runs, q, dst.data(), Decode::kAdd);
  EXPECT_EQ(dst[9], 110.0f);
}

TEST(WireQuant, NonFiniteGroupDecodesToNaN) {
  const WireQuant q{8, 4, true};
  std::vector<float> x{1, 2, INFINITY, 3, 1, 2, 3, 4};
  const std::vector<float> y = round_trip(x, {{0, 8, true}}, q, 0);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
  for (int i = 4; i < 8; ++i) EXPECT_TRUE(std::isfinite(y[i])) << i;
}

TEST(WireQuant, ZeroGroupStaysZero) {
  const std::vector<float> x(40, 0.0f);
  for (int bits : {8, 4}) {
    const std::vector<float> y = round_trip(x, {{0, 40, true}}, {bits, 16, true}, 3);
    for (float v : y) EXPECT_EQ(v, 0.0f);
  }
}

TEST(Hadamard, IsOrthonormalAndItsOwnInverse) {
  // Column j of the transform is the transform of the unit vector e_j: columns must be
  // orthonormal.
  std::vector<std::vector<float>> cols;
  for (int j = 0; j < kHadamardBlock; ++j) {
    std::vector<float> e(kHadamardBlock, 0.0f);
    e[j] = 1.0f;
    hadamard_blocks(e.data(), kHadamardBlock);
    cols.push_back(e);
  }
  for (int a = 0; a < kHadamardBlock; ++a) {
    for (int b = 0; b < kHadamardBlock; ++b) {
      double dot = 0;
      for (int i = 0; i < kHadamardBlock; ++i) dot += double(cols[a][i]) * cols[b][i];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6) << a << "," << b;
    }
  }
  std::vector<float> x = random_values(100, 4);  // three blocks and a 4-value tail
  const std::vector<float> original = x;
  hadamard_blocks(x.data(), 100);
  for (int i = 96; i < 100; ++i) EXPECT_EQ(x[i], original[i]);  // the tail is left alone
  hadamard_blocks(x.data(), 100);
  for (int i = 0; i < 100; ++i) EXPECT_NEAR(x[i], original[i], 1e-5f);
}

TEST(Hadamard, SpreadsAnOutlierSoQuantizationLosesLess) {
  std::vector<float> x = random_values(32, 8);
  x[5] = 30.0f;  // one outlier sets the group's scale
  const WireQuant q{4, 32, false};
  const std::vector<WireRun> runs{{0, 32, true}};
  const std::vector<float> plain = round_trip(x, runs, q, 0);
  std::vector<float> t = x;
  hadamard_runs(t.data(), runs);
  std::vector<float> smoothed = round_trip(t, runs, q, 0);
  hadamard_runs(smoothed.data(), runs);
  double err_plain = 0, err_smoothed = 0;
  for (int i = 0; i < 32; ++i) {
    err_plain += std::pow(plain[i] - x[i], 2);
    err_smoothed += std::pow(smoothed[i] - x[i], 2);
  }
  // Without smoothing a step is 30 / 7 and most values round to 0; the transform spreads the
  // outlier over the block, the step shrinks to about a quarter and so does the error.
  EXPECT_LT(err_smoothed, 0.5 * err_plain);
}

}  // namespace
}  // namespace ms::parallel
