// The quantized linear (ops/quant_gemm.h) against the f32 reference: y = x W^T computed in
// double on the dequantized weights, through one table of formats and shapes (a new format
// joins by adding rows). Every code path this CPU supports runs each case into an output
// between guard bands, and each is also compared to the scalar twin. Errors are measured
// against sum_k |x_k w_k|, the scale fp32 summation error grows with.
#include "ops/quant_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>

#include "tests/ops/guarded.h"
#include "tests/ops/quant_cases.h"

namespace ms::ops {
namespace {

using QuantGemmCase = test::QuantCase;

// Shapes cover GEMV (n = 1), every remainder of the four-row blocks, column counts below,
// at and past a vector width with tails, output counts that leave partial tiles, and rows long
// enough for the GEMV's blocks of four output channels.
const QuantGemmCase kCases[] = {
    {"f32_gemv", WeightFormat::kF32, 0, 1, 37, 100},
    {"f32_gemm", WeightFormat::kF32, 0, 7, 33, 129},
    {"bf16_gemv_tiny", WeightFormat::kBF16, 0, 1, 1, 1},
    {"bf16_gemv", WeightFormat::kBF16, 0, 1, 50, 200},
    {"bf16_gemm", WeightFormat::kBF16, 0, 6, 17, 71},
    {"int8_gemv_tiny", WeightFormat::kInt8, 0, 1, 3, 7},
    {"int8_gemv", WeightFormat::kInt8, 0, 1, 65, 256},
    {"int8_gemm", WeightFormat::kInt8, 0, 9, 40, 133},
    {"int4_g32_gemv", WeightFormat::kInt4, 32, 1, 19, 32},
    {"int4_g32_gemm", WeightFormat::kInt4, 32, 5, 24, 160},
    {"int4_g64_gemv", WeightFormat::kInt4, 64, 1, 48, 256},
    {"int4_g64_gemm", WeightFormat::kInt4, 64, 4, 31, 192},
    {"int4_g128_gemv", WeightFormat::kInt4, 128, 1, 16, 384},
    {"int4_g128_gemm", WeightFormat::kInt4, 128, 11, 9, 256},
    // Rows of x longer than kGemvShortCols: GEMV decodes four rows of W at a time there, and
    // each output must keep the bits it has in the batch, which decodes one row at a time.
    {"f32_gemm_long", WeightFormat::kF32, 0, 3, 7, 4100},
    {"bf16_gemm_long", WeightFormat::kBF16, 0, 2, 5, 4099},
    {"int8_gemm_long", WeightFormat::kInt8, 0, 6, 10, 4112},
    {"int4_g32_gemm_long", WeightFormat::kInt4, 32, 2, 6, 4128},
    {"int4_g64_gemm_long", WeightFormat::kInt4, 64, 5, 9, 4160},
    // int4 rows that are a multiple of 128 columns: the oct decode on both vector paths (blocks
    // of 128 columns on AVX-512, 64 on AVX2, spanning up to four groups, or half of one on AVX2
    // with groups of 128), short and long.
    {"int4_g32_gemv_oct", WeightFormat::kInt4, 32, 1, 7, 128},
    {"int4_g32_gemm_oct", WeightFormat::kInt4, 32, 6, 13, 384},
    {"int4_g32_gemm_long_oct", WeightFormat::kInt4, 32, 3, 6, 4224},
    {"int4_g128_gemm_long_oct", WeightFormat::kInt4, 128, 2, 5, 4352},
    // int4 rows that are a multiple of 64 columns but not of 128: AVX2's oct decode (here with
    // blocks spanning two groups; int4_g64_gemm and int4_g64_gemm_long above have them in one),
    // while AVX-512 takes them in pairs.
    {"int4_g32_gemv_oct64", WeightFormat::kInt4, 32, 1, 9, 320},
    {"int4_g32_gemm_oct64", WeightFormat::kInt4, 32, 5, 11, 192},
    {"int4_g32_gemm_long_oct64", WeightFormat::kInt4, 32, 2, 7, 4160},
};

// Largest error allowed, relative to sum_k |x_k w_k| of the output.
constexpr double kTolerance = 2e-6;

std::vector<CpuPath> supported_paths() { return test::supported_quant_paths(); }

class QuantGemmTest : public ::testing::TestWithParam<QuantGemmCase> {
 protected:
  void SetUp() override {
    const QuantGemmCase& c = GetParam();
    std::mt19937_64 rng(99);
    x_ = test::random_floats(static_cast<size_t>(c.n * c.cols), rng, -1, 1);
    const auto w = test::random_floats(static_cast<size_t>(c.rows * c.cols), rng, -1, 1);
    Result<QuantizedMatrix> q = quantize_weights(w.data(), c.rows, c.cols, c.format, c.group);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    q_ = std::move(q).value();
    deq_.resize(w.size());
    dequantize_weights(q_.view(), deq_.data());
  }

  std::vector<float> run(CpuPath path, int64_t n, const float* x) {
    test::Guarded<float> y(static_cast<size_t>(n * q_.rows));
    quantized_linear(x, q_.view(), y.data(), n, path);
    EXPECT_TRUE(y.guards_intact()) << cpu_path_name(path) << " wrote outside its output";
    return {y.data(), y.data() + y.size()};
  }

  // Worst |got - expected| / sum|x w| over the outputs, with `expected` in double when null.
  double worst_error(const std::vector<float>& got, const std::vector<float>* expected) const {
    const QuantGemmCase& c = GetParam();
    double worst = 0;
    for (int64_t t = 0; t < c.n; ++t) {
      for (int64_t r = 0; r < c.rows; ++r) {
        double ref = 0, scale = 1e-30;
        for (int64_t k = 0; k < c.cols; ++k) {
          const double p = double{x_[t * c.cols + k]} * deq_[r * c.cols + k];
          ref += p;
          scale += std::fabs(p);
        }
        if (expected != nullptr) ref = (*expected)[t * c.rows + r];
        worst = std::max(worst, std::fabs(got[t * c.rows + r] - ref) / scale);
      }
    }
    return worst;
  }

  std::vector<float> x_;
  QuantizedMatrix q_;
  std::vector<float> deq_;
};

TEST_P(QuantGemmTest, EveryPathMatchesTheF32ReferenceAndTheScalarTwin) {
  const QuantGemmCase& c = GetParam();
  const std::vector<float> scalar = run(CpuPath::kScalar, c.n, x_.data());
  EXPECT_LE(worst_error(scalar, nullptr), kTolerance) << "scalar";
  for (CpuPath path : supported_paths()) {
    const std::vector<float> y = run(path, c.n, x_.data());
    EXPECT_LE(worst_error(y, nullptr), kTolerance) << cpu_path_name(path) << " vs f32";
    EXPECT_LE(worst_error(y, &scalar), 2 * kTolerance) << cpu_path_name(path) << " vs scalar";
  }
}

TEST_P(QuantGemmTest, EachRowGivesTheSameBitsAloneAsInTheBatch) {
  test::expect_rows_alone_match_batch(GetParam(), x_.data(),
                                      [&](CpuPath path, int64_t n, const float* x) {
                                        return run(path, n, x);
                                      });
}

INSTANTIATE_TEST_SUITE_P(Ops, QuantGemmTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(QuantGemmPathTest, ScalarIsAlwaysSupportedAndTheBestPathIsSupported) {
  EXPECT_TRUE(cpu_path_supported(CpuPath::kScalar));
  EXPECT_TRUE(cpu_path_supported(best_cpu_path()));
  std::cout << "quantized linear paths on this CPU:";
  for (CpuPath p : supported_paths()) std::cout << ' ' << cpu_path_name(p);
  std::cout << " (best " << cpu_path_name(best_cpu_path()) << ")\n";
}

TEST(QuantGemmPathTest, NoRowsOfXWritesNothing) {
  const std::vector<float> w(64, 1.0f);
  Result<QuantizedMatrix> q = quantize_weights(w.data(), 2, 32, WeightFormat::kInt4, 32);
  ASSERT_TRUE(q.ok());
  test::Guarded<float> y(0);
  quantized_linear(nullptr, q->view(), y.data(), 0);
  EXPECT_TRUE(y.guards_intact());
}

}  // namespace
}  // namespace ms::ops
