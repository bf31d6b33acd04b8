// kernels::quantized_linear with int8 activations against its CPU twin: the device quantizes x
// into the same codes and scales as ops::quantize_activations (compared bit for bit), and the
// products match the scalar path's within fp32 summation-order rounding, relative to the sum of
// the magnitudes of the code products. Skips without a GPU, as kernel_quant_test does; the
// argument checks run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/device.h"
#include "kernels/quant_gemm.cuh"
#include "ops/quant_act.h"
#include "ops/quant_gemm.h"
#include "tests/ops/device_buffers.h"
#include "tests/ops/guarded.h"
#include "tests/ops/quant_cases.h"

namespace ms::kernels {
namespace {

using Int8ActTwinCase = test::QuantCase;

// GEMV and token tiles with a tail, row blocks with a tail, several chunks per thread, int4
// groups within a 32-column weight chunk's half chunk (32), a chunk (64) and two (128).
const Int8ActTwinCase kCases[] = {
    {"int8_gemv", ops::WeightFormat::kInt8, 0, 1, 65, 256},
    {"int8_gemm", ops::WeightFormat::kInt8, 0, 9, 33, 320},
    {"int8_gemv_wide", ops::WeightFormat::kInt8, 0, 1, 70, 8192},
    {"int4_g32_gemv", ops::WeightFormat::kInt4, 32, 1, 19, 64},
    {"int4_g32_gemm", ops::WeightFormat::kInt4, 32, 6, 24, 192},
    {"int4_g64_gemv_wide", ops::WeightFormat::kInt4, 64, 1, 1030, 4096},
    {"int4_g128_gemm", ops::WeightFormat::kInt4, 128, 11, 9, 4224},
};

constexpr double kTolerance = 4e-6;

using test::succeeded;
using test::upload;
using test::download;

class KernelInt8ActTest : public ::testing::TestWithParam<Int8ActTwinCase> {
 protected:
  void SetUp() override {
    const Result<int> count = device_count();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();
    const Int8ActTwinCase& c = GetParam();
    std::mt19937_64 rng(41);
    x_ = test::random_floats(static_cast<size_t>(c.n * c.cols), rng, -1, 1);
    for (size_t i = 0; i < x_.size(); i += 89) x_[i] *= 30;  // chunk scales that differ
    const auto w = test::random_floats(static_cast<size_t>(c.rows * c.cols), rng, -1, 1);
    Result<ops::QuantizedMatrix> q =
        ops::quantize_weights(w.data(), c.rows, c.cols, c.format, c.group);
    ASSERT_TRUE(q.ok()) << q.status().to_string();
    q_ = std::move(q).value();
    scale_cols_ = ops::activation_scale_cols(q_.view());
    ops::quantize_activations(x_.data(), c.n, c.cols, c.format, scale_cols_, &act_, true);
  }

  std::vector<float> x_;
  ops::QuantizedMatrix q_;
  ops::Int8Activations act_;
  int64_t scale_cols_ = ops::kActivationChunk;
};

TEST_P(KernelInt8ActTest, QuantizesXToTheCpuCodesAndScales) {
  const Int8ActTwinCase& c = GetParam();
  const size_t values = x_.size();
  const DeviceBuffer dx = upload(x_.data(), values);
  Result<DeviceBuffer> codes = DeviceBuffer::allocate(values);
  const size_t scale_count = values / static_cast<size_t>(scale_cols_);
  Result<DeviceBuffer> scales = DeviceBuffer::allocate(scale_count * sizeof(float));
  ASSERT_TRUE(succeeded(codes.status()) && succeeded(scales.status()));
  ASSERT_TRUE(succeeded(quantize_activations(dx.as<float>(), c.n, c.cols, c.format, scale_cols_,
                                             codes->as<signed char>(), scales->as<float>())));
  ASSERT_TRUE(succeeded(synchronize(nullptr)));
  const auto got_codes = download<int8_t>(*codes, values);
  const auto got_scales = download<float>(*scales, scale_count);
  ASSERT_EQ(got_scales.size(), act_.scales.size());
  EXPECT_EQ(std::memcmp(got_codes.data(), act_.codes.data(), values), 0);
  EXPECT_EQ(std::memcmp(got_scales.data(), act_.scales.data(), got_scales.size() * 4), 0);
}

TEST_P(KernelInt8ActTest, MatchesTheCpuTwin) {
  const Int8ActTwinCase& c = GetParam();
  std::vector<float> expected(static_cast<size_t>(c.n * c.rows));
  ops::quantized_linear(x_.data(), q_.view(), expected.data(), c.n, ops::CpuPath::kScalar,
                        ops::ActivationFormat::kInt8);
  const DeviceBuffer dx = upload(x_.data(), x_.size());
  const DeviceBuffer dv = upload(q_.values.data(), q_.values.size());
  const DeviceBuffer ds = upload(q_.scales.data(), q_.scales.size());
  ops::QuantView dw = q_.view();
  dw.values = dv.as<uint8_t>();
  dw.scales = ds.as<float>();
  test::Guarded<float> y(expected.size());
  Result<DeviceBuffer> dy = DeviceBuffer::allocate(y.storage_bytes());
  ASSERT_TRUE(succeeded(dy.status()));
  ASSERT_TRUE(succeeded(copy_to_device(dy->data(), y.storage(), y.storage_bytes())));
  ASSERT_TRUE(succeeded(kernels::quantized_linear(dx.as<float>(), dw,
                                                  dy->as<float>() + test::kGuardElements, c.n,
                                                  ops::ActivationFormat::kInt8)));
  ASSERT_TRUE(succeeded(synchronize(nullptr)));
  ASSERT_TRUE(succeeded(copy_to_host(y.storage(), dy->data(), y.storage_bytes())));
  EXPECT_TRUE(y.guards_intact()) << "wrote outside y";

  std::vector<float> deq(static_cast<size_t>(c.rows * c.cols));
  ops::dequantize_weights(q_.view(), deq.data());
  for (int64_t t = 0; t < c.n; ++t) {
    for (int64_t r = 0; r < c.rows; ++r) {
      double scale = 1e-30;
      for (int64_t k = 0; k < c.cols; ++k) {
        scale += std::fabs(act_.code(t, k) * double{act_.scale(t, k)} * deq[r * c.cols + k]);
      }
      const size_t i = static_cast<size_t>(t * c.rows + r);
      ASSERT_LE(std::fabs(y[i] - expected[i]) / scale, kTolerance) << "t=" << t << " r=" << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelInt8ActTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(KernelInt8ActArgsTest, RefusesAWidthThatIsNotWholeChunks) {
  Status s = quantize_activations(nullptr, 1, 96, ops::WeightFormat::kInt8, 64, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cols 96"), std::string::npos) << s.message();
  s = quantize_activations(nullptr, 1, 192, ops::WeightFormat::kInt4, 128, nullptr, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cols 192 is not a multiple of 128"), std::string::npos)
      << s.message();
}

TEST(KernelInt8ActArgsTest, RefusesAScaleSpanOtherThan64Or128ForInt4) {
  for (const auto& [format, span] : {std::pair{ops::WeightFormat::kInt8, int64_t{128}},
                                     std::pair{ops::WeightFormat::kInt4, int64_t{32}}}) {
    const Status s = quantize_activations(nullptr, 1, 256, format, span, nullptr, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("scale_cols " + std::to_string(span)), std::string::npos)
        << s.message();
  }
}

TEST(KernelInt8ActArgsTest, ChecksArgumentsAsTheF32Path) {
  ops::QuantView w{ops::WeightFormat::kInt4, 4, 128, 48, nullptr, nullptr};
  const Status s = kernels::quantized_linear(nullptr, w, nullptr, 1, ops::ActivationFormat::kInt8);
  EXPECT_NE(s.message().find("group size 48"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ms::kernels
