// bf16/f16 reductions behind the MPI user-defined operators: fp32 arithmetic per pairwise
// combine, rounded back to nearest even.
#include "comm/half_reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/half.h"

namespace ms::comm {
namespace {

std::vector<uint16_t> bf16s(std::initializer_list<float> values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(float_to_bf16(v));
  return out;
}

std::vector<uint16_t> f16s(std::initializer_list<float> values) {
  std::vector<uint16_t> out;
  for (float v : values) out.push_back(float_to_f16(v));
  return out;
}

TEST(ReduceBf16, SmallIntegersAreExact) {
  const std::vector<uint16_t> in = bf16s({3, -7, 100, 0});
  std::vector<uint16_t> sum = bf16s({4, 2, 156, -0.0f});
  reduce_bf16(ReduceOp::kSum, in.data(), sum.data(), sum.size());
  EXPECT_EQ(sum, bf16s({7, -5, 256, 0}));
  std::vector<uint16_t> max = bf16s({4, -9, 1, 0});
  reduce_bf16(ReduceOp::kMax, in.data(), max.data(), max.size());
  EXPECT_EQ(max, bf16s({4, -7, 100, 0}));
  std::vector<uint16_t> min = bf16s({4, -9, 1, 0});
  reduce_bf16(ReduceOp::kMin, in.data(), min.data(), min.size());
  EXPECT_EQ(min, bf16s({3, -9, 1, 0}));
}

TEST(ReduceBf16, SumsRoundEveryStepSoOrderMatters) {
  // bf16 keeps 8 significant bits: 1 + 2^-8 is a tie that rounds to even (1.0).
  const float tiny = std::ldexp(1.0f, -8);
  std::vector<uint16_t> left = bf16s({1.0f});
  const std::vector<uint16_t> t = bf16s({tiny});
  reduce_bf16(ReduceOp::kSum, t.data(), left.data(), 1);
  reduce_bf16(ReduceOp::kSum, t.data(), left.data(), 1);
  EXPECT_EQ(bf16_to_float(left[0]), 1.0f);  // (1 + tiny) + tiny
  std::vector<uint16_t> right = bf16s({tiny});
  reduce_bf16(ReduceOp::kSum, t.data(), right.data(), 1);
  const std::vector<uint16_t> one = bf16s({1.0f});
  reduce_bf16(ReduceOp::kSum, one.data(), right.data(), 1);
  EXPECT_EQ(bf16_to_float(right[0]), 1.0f + 2 * tiny);  // 1 + (tiny + tiny)
}

TEST(ReduceBf16, NanWinsMaxAndMin) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<uint16_t> in = bf16s({nan, 1});
  std::vector<uint16_t> max = bf16s({5, nan});
  reduce_bf16(ReduceOp::kMax, in.data(), max.data(), 2);
  EXPECT_TRUE(std::isnan(bf16_to_float(max[0])));
  EXPECT_TRUE(std::isnan(bf16_to_float(max[1])));
  std::vector<uint16_t> min = bf16s({5, nan});
  reduce_bf16(ReduceOp::kMin, in.data(), min.data(), 2);
  EXPECT_TRUE(std::isnan(bf16_to_float(min[0])));
  EXPECT_TRUE(std::isnan(bf16_to_float(min[1])));
}

TEST(ReduceF16, SumsMaxAndMin) {
  const std::vector<uint16_t> in = f16s({1000, -0.5f, 2048});
  std::vector<uint16_t> sum = f16s({24, 0.25f, 1});
  reduce_f16(ReduceOp::kSum, in.data(), sum.data(), 3);
  // 2049 is not an f16 value: it is a tie between 2048 and 2050 and rounds to even (2048).
  EXPECT_EQ(sum, f16s({1024, -0.25f, 2048}));
  std::vector<uint16_t> max = f16s({24, 0.25f, 1});
  reduce_f16(ReduceOp::kMax, in.data(), max.data(), 3);
  EXPECT_EQ(max, f16s({1000, 0.25f, 2048}));
  std::vector<uint16_t> min = f16s({24, 0.25f, 1});
  reduce_f16(ReduceOp::kMin, in.data(), min.data(), 3);
  EXPECT_EQ(min, f16s({24, -0.5f, 1}));
}

TEST(ReduceF16, OverflowBecomesInfinity) {
  const std::vector<uint16_t> in = f16s({65504});
  std::vector<uint16_t> sum = f16s({65504});
  reduce_f16(ReduceOp::kSum, in.data(), sum.data(), 1);
  EXPECT_TRUE(std::isinf(f16_to_float(sum[0])));
}

}  // namespace
}  // namespace ms::comm
