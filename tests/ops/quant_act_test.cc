// int8 activations (ops/quant_act.h) and the integer kernels of the quantized linear
// (ops/quant_gemm.h with ActivationFormat::kInt8), through one table of weight formats and
// shapes. Each code path is held to two references computed in double:
//   - the exact one: the activations' codes and scales times the weights' codes and scales,
//     which the kernels must match to fp32 summation error (a wrong code, lane or scale fails);
//   - the f32 one: x times the dequantized weights, which they may leave by at most
//     sum_k |w_k| * d_k / 2 (d_k the scale of x_k's chunk), the activations' rounding.
#include "ops/quant_act.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>

#include "ops/quant_gemm.h"
#include "tests/ops/guarded.h"
#include "tests/ops/quant_cases.h"

namespace ms::ops {
namespace {

constexpr int64_t kChunk = kActivationChunk;

std::vector<float> quantize_one_chunk(const std::vector<float>& x, WeightFormat format,
                                      Int8Activations* q) {
  quantize_activations(x.data(), 1, static_cast<int64_t>(x.size()), format, q);
  return q->scales;
}

TEST(QuantActTest, NamesParseBackAndOthersAreRefused) {
  for (ActivationFormat f : {ActivationFormat::kF32, ActivationFormat::kInt8}) {
    Result<ActivationFormat> back = parse_activation_format(activation_format_name(f));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, f);
  }
  const Status s = parse_activation_format("int4").status();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'int4' is not one of f32, int8"), std::string::npos) << s.message();
}

TEST(QuantActTest, ApplyToInt8AndInt4RowsOfWholeChunksOnly) {
  QuantView w;
  w.cols = 128;
  for (WeightFormat f : {WeightFormat::kF32, WeightFormat::kBF16}) {
    w.format = f;
    EXPECT_FALSE(int8_activations_apply(w)) << weight_format_name(f);
  }
  for (WeightFormat f : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    w.format = f;
    w.cols = 128;
    EXPECT_TRUE(int8_activations_apply(w)) << weight_format_name(f);
    w.cols = 96;
    EXPECT_FALSE(int8_activations_apply(w)) << weight_format_name(f);
  }
}

TEST(QuantActTest, Int4InGroupsOf128TakesAScalePer128ColumnsAndTheRestPer64) {
  QuantView w;
  w.cols = 256;
  w.format = WeightFormat::kInt8;
  EXPECT_EQ(activation_scale_cols(w), 64);
  w.format = WeightFormat::kInt4;
  for (int64_t group : {32, 64, 128}) {
    w.group_size = group;
    EXPECT_EQ(activation_scale_cols(w), group == 128 ? 128 : 64) << "group " << group;
  }
}

TEST(QuantActTest, CodesRoundToTheNearestTiesToEvenWithinTheRange) {
  // max|x| = 127 makes the scale 1, so the codes are x rounded.
  std::vector<float> x(kChunk, 0.0f);
  const float values[] = {127, -127, 2.5f, 3.5f, -0.5f, -1.5f, 0.49f, -2.51f, 126.5f};
  const int codes[] = {127, -127, 2, 4, 0, -2, 0, -3, 126};
  for (size_t i = 0; i < std::size(values); ++i) x[i * 7] = values[i];
  for (WeightFormat format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    Int8Activations q;
    EXPECT_EQ(quantize_one_chunk(x, format, &q)[0], 1.0f);
    for (size_t i = 0; i < std::size(values); ++i) {
      EXPECT_EQ(q.code(0, static_cast<int64_t>(i * 7)), codes[i])
          << weight_format_name(format) << " x = " << values[i];
    }
  }
}

// With the scale per 128 columns of int4 in groups of 128 (activation_scale_cols) too: one
// scale's maximum, codes and biases still laid out per chunk of 64.
TEST(QuantActTest, EveryValueIsWithinHalfAScaleAndTheLayoutIsAsDocumented) {
  std::mt19937_64 rng(5);
  const int64_t n = 3, cols = 4 * kChunk;
  std::vector<float> x = test::random_floats(static_cast<size_t>(n * cols), rng, -2, 2);
  x[70] = 0;  // a chunk whose maximum sits elsewhere
  for (x[cols + 5] *= 3; const auto& [format, per] :
       {std::pair{WeightFormat::kInt8, kChunk}, std::pair{WeightFormat::kInt4, kChunk},
        std::pair{WeightFormat::kInt4, 2 * kChunk}}) {
    SCOPED_TRACE(std::string(weight_format_name(format)) + ", a scale per " + std::to_string(per));
    Int8Activations q;
    quantize_activations(x.data(), n, cols, format, per, &q, true);
    ASSERT_EQ(q.scale_cols, per);
    ASSERT_EQ(q.codes.size(), static_cast<size_t>(n * cols));
    ASSERT_EQ(q.scales.size(), static_cast<size_t>(n * cols / per));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c0 = 0; c0 < cols; c0 += per) {
        float amax = 0;
        for (int64_t k = c0; k < c0 + per; ++k) amax = std::max(amax, std::fabs(x[t * cols + k]));
        EXPECT_FLOAT_EQ(q.scale(t, c0), amax / 127);
        int reached = 0;
        for (int64_t k = c0; k < c0 + per; ++k) {
          const int code = q.code(t, k);
          EXPECT_LE(std::abs(code), 127);
          reached = std::max(reached, std::abs(code));
          EXPECT_LE(std::fabs(x[t * cols + k] - code * q.scale(t, k)), q.scale(t, k) * 0.5001f)
              << weight_format_name(format) << " row " << t << " col " << k;
        }
        EXPECT_EQ(reached, 127);
      }
    }
    // The documented layout: int8 keeps column order, int4 puts each chunk's
    // even columns first, and its nibble bias is 8 times the sum of each 8
    // columns' codes.
    for (int64_t k = 0; k < cols; ++k) {
      const int64_t in = k % kChunk;
      const int64_t at =
          format == WeightFormat::kInt8 ? k : k - in + (in % 2 == 0 ? in / 2 : kChunk / 2 + in / 2);
      EXPECT_EQ(q.codes[static_cast<size_t>(cols + at)], q.code(1, k));
    }
    if (format == WeightFormat::kInt4) {
      ASSERT_EQ(q.nibble_bias.size(), static_cast<size_t>(n * cols / 8));
      for (int64_t oct = 0; oct < cols / 8; ++oct) {
        int sum = 0;
        for (int64_t k = 8 * oct; k < 8 * oct + 8; ++k) sum += q.code(2, k);
        EXPECT_EQ(q.nibble_bias[static_cast<size_t>(2 * cols / 8 + oct)], 8 * sum);
      }
    } else {
      EXPECT_TRUE(q.nibble_bias.empty());
    }
  }
}

TEST(QuantActTest, AZeroChunkHasScaleZeroAndANonFiniteOneScaleNaN) {
  std::vector<float> x(2 * kChunk, 0.0f);
  x[kChunk + 3] = std::numeric_limits<float>::infinity();
  x[kChunk + 4] = 1.0f;
  Int8Activations q;
  quantize_activations(x.data(), 1, 2 * kChunk, WeightFormat::kInt8, &q);
  EXPECT_EQ(q.scales[0], 0.0f);
  EXPECT_TRUE(std::isnan(q.scales[1]));
  for (int64_t k = 0; k < 2 * kChunk; ++k) EXPECT_EQ(q.code(0, k), 0);

  // ... so the outputs it feeds are NaN, as an infinite activation makes them
  // with f32.
  std::vector<float> ones(4 * 2 * kChunk, 1.0f);
  Result<QuantizedMatrix> w = quantize_weights(ones.data(), 4, 2 * kChunk, WeightFormat::kInt8);
  ASSERT_TRUE(w.ok());
  std::vector<float> y(4);
  quantized_linear(x.data(), w->view(), y.data(), 1, ActivationFormat::kInt8);
  for (float v : y) EXPECT_TRUE(std::isnan(v));
}

// The AVX2 quantizer takes the scalar loop's steps in the same IEEE operations; any other
// rounding, clamp, finiteness rule or byte order changes a code, a scale or a bias here.
TEST(QuantActTest, TheVectorQuantizerGivesTheScalarLoopsBits) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
#else
  GTEST_SKIP() << "the vector quantizer is x86-64 only";
#endif
  std::mt19937_64 rng(23);
  const int64_t n = 3, chunks = 12, cols = chunks * kChunk;
  std::vector<float> x = test::random_floats(static_cast<size_t>(n * cols), rng, -3, 3);
  const float inf = std::numeric_limits<float>::infinity();
  const auto chunk = [&](int64_t t, int64_t c) { return x.data() + t * cols + c * kChunk; };
  std::fill(chunk(0, 1), chunk(0, 2), 0.0f);                         // all zero: scale 0
  std::fill(chunk(0, 2), chunk(0, 3), -0.0f);                        // negative zeros
  chunk(0, 3)[5] = std::numeric_limits<float>::quiet_NaN();         // NaN: scale NaN
  chunk(0, 4)[63] = -inf;                                           // inf: scale NaN
  chunk(0, 5)[0] = std::numeric_limits<float>::max();               // finite extreme
  for (int64_t k = 0; k < kChunk; ++k) chunk(1, 0)[k] = 0.5f * static_cast<float>(k - 32);
  chunk(1, 0)[1] = -127.0f;  // scale 1, so the halves above are ties to even
  for (int64_t k = 0; k < kChunk; ++k) chunk(1, 1)[k] *= 1e-40f;    // subnormal inputs
  for (int64_t k = 0; k < kChunk; ++k) chunk(1, 2)[k] *= 1e30f;     // large ones
  for (int64_t k = 0; k < kChunk; ++k) chunk(1, 3)[k] = -std::fabs(chunk(1, 3)[k]);
  chunk(2, 0)[17] = 1e-30f;  // one tiny value among zeros
  std::fill(chunk(2, 0), chunk(2, 0) + 17, 0.0f);
  std::fill(chunk(2, 0) + 18, chunk(2, 1), 0.0f);
  for (const auto& [format, per] :
       {std::pair{WeightFormat::kInt8, kChunk}, std::pair{WeightFormat::kInt4, kChunk},
        std::pair{WeightFormat::kInt4, 2 * kChunk}}) {
    SCOPED_TRACE(std::string(weight_format_name(format)) + ", a scale per " + std::to_string(per));
    Int8Activations scalar, vector;
    quantize_activations(x.data(), n, cols, format, per, &scalar, false);
    quantize_activations(x.data(), n, cols, format, per, &vector, true);
    EXPECT_EQ(vector.codes, scalar.codes);
    ASSERT_EQ(vector.scales.size(), scalar.scales.size());
    EXPECT_EQ(0, std::memcmp(vector.scales.data(), scalar.scales.data(),
                             scalar.scales.size() * sizeof(float)));
    EXPECT_EQ(vector.nibble_bias, scalar.nibble_bias);
  }
}

TEST(QuantActTest, GroupBiasIsTheScaleTimesEightTimesTheGroupsCodeSum) {
  std::mt19937_64 rng(5);
  const int64_t n = 3, cols = 384;
  auto x = test::random_floats(static_cast<size_t>(n * cols), rng, -1, 1);
  x[static_cast<size_t>(cols + 70)] = std::numeric_limits<float>::quiet_NaN();  // row 1, chunk 1
  for (const auto& [group, per] : {std::pair<int64_t, int64_t>{32, kChunk}, {64, kChunk},
                                   {128, 2 * kChunk}}) {
    SCOPED_TRACE("groups of " + std::to_string(group));
    Int8Activations act;
    quantize_activations(x.data(), n, cols, WeightFormat::kInt4, per, &act, true);
    std::vector<float> bias;
    int4_group_bias(act, group, &bias);
    const int64_t groups = cols / group;
    ASSERT_EQ(bias.size(), static_cast<size_t>(n * groups));
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t g = 0; g < groups; ++g) {
        int64_t sum = 0;
        for (int64_t k = g * group; k < (g + 1) * group; ++k) sum += act.code(t, k);
        const float want = static_cast<float>(8 * sum) * act.scale(t, g * group);
        const float got = bias[static_cast<size_t>(t * groups + g)];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << "row " << t << " group " << g;
        } else {
          EXPECT_EQ(got, want) << "row " << t << " group " << g;
        }
      }
    }
    // The NaN's scale span (columns 64-127 of row 1, or 0-127 with a scale per 128) makes its
    // groups' bias NaN; row 1's first group lies outside it unless the span is 128.
    EXPECT_TRUE(std::isnan(bias[static_cast<size_t>(groups + 64 / group)]));
    if (per == kChunk) {
      EXPECT_FALSE(std::isnan(bias[static_cast<size_t>(groups)]));
    }
  }
}

TEST(QuantActTest, Int4StepLayoutPutsBothChunksEvenColumnsBeforeTheirOddOnes) {
  std::mt19937_64 rng(6);
  const int64_t n = 2, cols = 320;  // two steps of 128 columns and a single chunk after them
  const auto x = test::random_floats(static_cast<size_t>(n * cols), rng, -1, 1);
  Int8Activations act;
  quantize_activations(x.data(), n, cols, WeightFormat::kInt4, &act);
  std::vector<int8_t> steps;
  int4_step_layout(act, &steps);
  ASSERT_EQ(steps.size(), act.codes.size());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t col = 0; col < cols; ++col) {
      const int64_t s = col / (2 * kChunk), in_step = col % (2 * kChunk);
      const int64_t chunk = in_step / kChunk, j = in_step % kChunk;
      // Per step: chunk 0's even columns, chunk 1's, chunk 0's odd ones, chunk 1's; the tail
      // chunk as x lays it out.
      const int64_t at = col < 256
                             ? s * 2 * kChunk + (j % 2) * kChunk + chunk * (kChunk / 2) + j / 2
                             : Int8Activations::code_index(WeightFormat::kInt4, col);
      EXPECT_EQ(steps[static_cast<size_t>(t * cols + at)], act.code(t, col))
          << "row " << t << " column " << col;
    }
  }
}

using Int8ActCase = test::QuantCase;

// GEMV and every remainder of the four-row blocks of x, an odd and an even
// number of chunks (the kernels alternate two accumulators), partial tiles of
// 16 output channels, and int4 groups within a half chunk (32), a chunk (64)
// and across two chunks (128).
const Int8ActCase kCases[] = {
    {"int8_gemv_one_chunk", WeightFormat::kInt8, 0, 1, 5, 64},
    {"int8_gemv", WeightFormat::kInt8, 0, 1, 37, 320},
    {"int8_gemm", WeightFormat::kInt8, 0, 7, 33, 256},
    {"int8_gemm_long", WeightFormat::kInt8, 0, 5, 9, 4160},
    {"int4_g32_gemv", WeightFormat::kInt4, 32, 1, 19, 64},
    {"int4_g32_gemm", WeightFormat::kInt4, 32, 6, 24, 192},
    {"int4_g64_gemv", WeightFormat::kInt4, 64, 1, 48, 256},
    {"int4_g64_gemm", WeightFormat::kInt4, 64, 9, 17, 448},
    {"int4_g128_gemv", WeightFormat::kInt4, 128, 1, 16, 384},
    {"int4_g128_gemm", WeightFormat::kInt4, 128, 3, 40, 4224},
    {"int4_g128_gemm_two", WeightFormat::kInt4, 128, 2, 3, 128},
};

std::vector<CpuPath> supported_paths() { return test::supported_quant_paths(); }

// Largest error allowed against the exact reference, relative to the sum of the
// magnitudes of its terms (what fp32 summation error grows with).
constexpr double kTolerance = 2e-6;

class Int8ActTest : public ::testing::TestWithParam<Int8ActCase> {
 protected:
  void SetUp() override {
    const Int8ActCase& c = GetParam();
    std::mt19937_64 rng(17);
    x_ = test::random_floats(static_cast<size_t>(c.n * c.cols), rng, -1, 1);
    // A few large activations, as real ones have, so chunk scales differ
    // widely.
    for (size_t i = 0; i < x_.size(); i += 97) x_[i] *= 20;
    const auto w = test::random_floats(static_cast<size_t>(c.rows * c.cols), rng, -1, 1);
    Result<QuantizedMatrix> q = quantize_weights(w.data(), c.rows, c.cols, c.format, c.group);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    q_ = std::move(q).value();
    ASSERT_TRUE(int8_activations_apply(q_.view()));
    deq_.resize(w.size());
    dequantize_weights(q_.view(), deq_.data());
    // As the kernels quantize x for these weights.
    quantize_activations(x_.data(), c.n, c.cols, c.format, activation_scale_cols(q_.view()), &act_,
                         true);
  }

  std::vector<float> run(CpuPath path, int64_t n, const float* x) {
    test::Guarded<float> y(static_cast<size_t>(n * q_.rows));
    quantized_linear(x, q_.view(), y.data(), n, path, ActivationFormat::kInt8);
    EXPECT_TRUE(y.guards_intact()) << cpu_path_name(path) << " wrote outside its output";
    return {y.data(), y.data() + y.size()};
  }

  // The weight code and scale of (r, k), so the exact reference is built from
  // codes.
  double weight_code(int64_t r, int64_t k) const {
    const QuantView w = q_.view();
    if (w.format == WeightFormat::kInt8) return static_cast<int8_t>(w.values[r * w.cols + k]);
    return int4_code(w.values + r * (w.cols / 2), k);
  }
  double weight_scale(int64_t r, int64_t k) const {
    const QuantView w = q_.view();
    if (w.format == WeightFormat::kInt8) return w.scales[r];
    return w.scales[r * (w.cols / w.group_size) + k / w.group_size];
  }

  std::vector<float> x_;
  QuantizedMatrix q_;
  std::vector<float> deq_;
  Int8Activations act_;
};

TEST_P(Int8ActTest, EveryPathMatchesTheExactProductOfTheCodes) {
  const Int8ActCase& c = GetParam();
  for (CpuPath path : supported_paths()) {
    const std::vector<float> y = run(path, c.n, x_.data());
    double worst = 0;
    for (int64_t t = 0; t < c.n; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double ref = 0, scale = 1e-30;
        for (int64_t k = 0; k < c.cols; ++k) {
          const double p =
              weight_code(r, k) * weight_scale(r, k) * act_.code(t, k) * double{act_.scale(t, k)};
          ref += p;
          scale += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(y[t * c.rows + r] - ref) / scale);
      }
    }
    EXPECT_LE(worst, kTolerance) << cpu_path_name(path);
  }
}

TEST_P(Int8ActTest, EveryPathStaysWithinTheActivationRoundingOfTheF32Product) {
  const Int8ActCase& c = GetParam();
  for (CpuPath path : supported_paths()) {
    const std::vector<float> y = run(path, c.n, x_.data());
    for (int64_t t = 0; t < c.n; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double ref = 0, magnitude = 0, rounding = 0;
        for (int64_t k = 0; k < c.cols; ++k) {
          const double wk = deq_[r * c.cols + k];
          ref += double{x_[t * c.cols + k]} * wk;
          magnitude += std::fabs(double{x_[t * c.cols + k]} * wk);
          rounding += std::fabs(wk) * act_.scale(t, k) * 0.5001;
        }
        ASSERT_LE(std::fabs(y[t * c.rows + r] - ref), rounding + 4 * kTolerance * magnitude)
            << cpu_path_name(path) << " row " << t << " output " << r;
      }
    }
  }
}

TEST_P(Int8ActTest, EachRowGivesTheSameBitsAloneAsInTheBatch) {
  test::expect_rows_alone_match_batch(GetParam(), x_.data(),
                                      [&](CpuPath path, int64_t n, const float* x) {
                                        return run(path, n, x);
                                      });
}

INSTANTIATE_TEST_SUITE_P(Ops, Int8ActTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(Int8ActFallbackTest, MatricesTheyDoNotApplyToGetTheF32ActivationBits) {
  std::mt19937_64 rng(3);
  struct Shape {
    WeightFormat format;
    int64_t cols, group;
  };
  for (const Shape& s : {Shape{WeightFormat::kInt4, 96, 32}, Shape{WeightFormat::kInt8, 100, 0},
                         Shape{WeightFormat::kBF16, 128, 0}, Shape{WeightFormat::kF32, 64, 0}}) {
    const int64_t n = 3, rows = 5;
    const auto x = test::random_floats(static_cast<size_t>(n * s.cols), rng, -1, 1);
    const auto w = test::random_floats(static_cast<size_t>(rows * s.cols), rng, -1, 1);
    Result<QuantizedMatrix> q = quantize_weights(w.data(), rows, s.cols, s.format, s.group);
    ASSERT_TRUE(q.ok());
    for (CpuPath path : supported_paths()) {
      std::vector<float> f32(static_cast<size_t>(n * rows)), int8(f32.size());
      quantized_linear(x.data(), q->view(), f32.data(), n, path);
      quantized_linear(x.data(), q->view(), int8.data(), n, path, ActivationFormat::kInt8);
      EXPECT_EQ(std::memcmp(f32.data(), int8.data(), f32.size() * 4), 0)
          << weight_format_name(s.format) << " cols " << s.cols << " " << cpu_path_name(path);
    }
  }
}

}  // namespace
}  // namespace ms::ops
