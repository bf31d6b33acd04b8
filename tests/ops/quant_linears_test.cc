// quantized_linears (ops/quant_gemm.h): several weights that read the same x, as q, k and v
// do, give each output the bits quantized_linear gives it alone, on every path, with f32 and
// int8 activations, whether the weights share a format (one quantization of x, one parallel
// region) or not (each in turn).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "ops/quant_gemm.h"
#include "tests/ops/quant_cases.h"

namespace ms::ops {
namespace {

struct Weight {
  WeightFormat format;
  int64_t group;
  int64_t rows;
};

QuantizedMatrix random_weight(const Weight& w, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> values(static_cast<size_t>(w.rows * cols));
  for (float& v : values) v = normal(rng);
  Result<QuantizedMatrix> q = quantize_weights(values.data(), w.rows, cols, w.format, w.group);
  EXPECT_TRUE(q.ok()) << q.status().message();
  return std::move(q).value();
}

// Runs the weights together and alone, and compares each output's bits.
void expect_together_equals_alone(const std::vector<Weight>& weights, int64_t n, int64_t cols) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (float& v : x) v = uniform(rng);
  std::vector<QuantizedMatrix> matrices;
  for (size_t i = 0; i < weights.size(); ++i) {
    matrices.push_back(random_weight(weights[i], cols, static_cast<uint32_t>(11 + i)));
  }
  for (CpuPath path : test::supported_quant_paths()) {
    for (ActivationFormat activations : {ActivationFormat::kF32, ActivationFormat::kInt8}) {
      std::vector<std::vector<float>> together(weights.size()), alone(weights.size());
      std::vector<QuantLinearOut> outs;
      for (size_t i = 0; i < weights.size(); ++i) {
        together[i].assign(static_cast<size_t>(n * weights[i].rows), -1.0f);
        alone[i].assign(together[i].size(), -2.0f);
        outs.push_back({matrices[i].view(), together[i].data()});
        quantized_linear(x.data(), matrices[i].view(), alone[i].data(), n, path, activations);
      }
      quantized_linears(x.data(), outs, n, path, activations);
      for (size_t i = 0; i < weights.size(); ++i) {
        EXPECT_EQ(std::memcmp(together[i].data(), alone[i].data(), together[i].size() * 4), 0)
            << cpu_path_name(path) << " " << activation_format_name(activations) << " weight " << i;
      }
    }
  }
}

TEST(QuantLinearsTest, QKAndVOfOneFormatGiveTheirOwnBits) {
  // Shapes of q, k and v under grouped-query attention: k and v narrower than q.
  expect_together_equals_alone(
      {{WeightFormat::kInt4, 64, 48}, {WeightFormat::kInt4, 64, 16}, {WeightFormat::kInt4, 64, 16}},
      1, 256);
  expect_together_equals_alone(
      {{WeightFormat::kInt8, 0, 33}, {WeightFormat::kInt8, 0, 9}, {WeightFormat::kInt8, 0, 9}}, 5,
      192);
}

TEST(QuantLinearsTest, GateAndUpOfManyRowsSplitIntoBlocksOfEach) {
  // More rows than one block each, so blocks of both weights interleave across threads.
  expect_together_equals_alone({{WeightFormat::kInt4, 32, 700}, {WeightFormat::kInt4, 32, 700}}, 2,
                               128);
}

TEST(QuantLinearsTest, MixedFormatsAndWidthsWithoutWholeChunksTakeTheirTurn) {
  // A bit allocation may give q, k and v different formats; 100 columns are not whole chunks
  // of 64, so int8 activations do not apply there.
  expect_together_equals_alone(
      {{WeightFormat::kInt8, 0, 20}, {WeightFormat::kInt4, 32, 12}, {WeightFormat::kBF16, 0, 12}},
      3, 128);
  expect_together_equals_alone({{WeightFormat::kInt8, 0, 20}, {WeightFormat::kBF16, 0, 12}}, 1,
                               100);
}

TEST(QuantLinearsTest, Int4OfDifferentGroupSizesGiveTheirOwnBits) {
  // Groups of 32 and 64 share an activation scale span (64), but the vector kernels subtract
  // nibble biases summed per weight group, so x's group sums must be each weight's own.
  expect_together_equals_alone(
      {{WeightFormat::kInt4, 32, 24}, {WeightFormat::kInt4, 64, 16}, {WeightFormat::kInt4, 32, 8}},
      2, 256);
}

TEST(QuantLinearsTest, NoRowsOrNoWeightsWriteNothing) {
  const QuantizedMatrix w = random_weight({WeightFormat::kInt4, 64, 4}, 64, 1);
  std::vector<float> y(4, 3.0f);
  const QuantLinearOut out{w.view(), y.data()};
  quantized_linears(nullptr, {&out, 1}, 0, ActivationFormat::kInt8);
  quantized_linears(nullptr, {}, 1, ActivationFormat::kInt8);
  EXPECT_EQ(y, std::vector<float>(4, 3.0f));
}

}  // namespace
}  // namespace ms::ops
