// kernels::quantized_linear against its CPU twin, ops::quantized_linear on the scalar path, for
// every weight format on GEMV and GEMM shapes with tails, through both of its kernels (the
// chunked one for rows of whole 16-byte chunks and an aligned x, the element one otherwise: odd
// widths and an x one float off alignment); y on the device sits between guard bands. Without
// a GPU every case skips with the reason from device_count(); the argument checks run
// everywhere since they answer before anything reaches a device.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <random>
#include <vector>

#include "kernels/device.h"
#include "kernels/quant_gemm.cuh"
#include "ops/quant_gemm.h"
#include "tests/ops/device_buffers.h"
#include "tests/ops/guarded.h"

namespace ms::kernels {
namespace {

struct QuantTwinCase {
  const char* name;
  ops::WeightFormat format;
  int64_t group;
  int64_t n, rows, cols;
  int64_t x_offset = 0;  // floats between the allocation's start and x
};
void PrintTo(const QuantTwinCase& c, std::ostream* os) { *os << c.name; }

const QuantTwinCase kCases[] = {
    {"f32_gemm", ops::WeightFormat::kF32, 0, 5, 37, 100},
    {"bf16_gemv", ops::WeightFormat::kBF16, 0, 1, 50, 200},
    {"int8_gemv", ops::WeightFormat::kInt8, 0, 1, 65, 257},
    {"int8_gemm", ops::WeightFormat::kInt8, 0, 9, 40, 133},
    {"int4_g32_gemm", ops::WeightFormat::kInt4, 32, 5, 24, 160},
    {"int4_g64_gemv", ops::WeightFormat::kInt4, 64, 1, 300, 512},
    {"int4_g128_gemm", ops::WeightFormat::kInt4, 128, 11, 9, 256},
    // Several chunks per thread and row, row blocks with a tail, token tiles with a tail.
    {"f32_gemv_wide", ops::WeightFormat::kF32, 0, 1, 13, 2052},
    {"bf16_gemv_wide", ops::WeightFormat::kBF16, 0, 1, 67, 4096},
    {"int8_gemv_wide", ops::WeightFormat::kInt8, 0, 1, 70, 4096},
    {"int8_gemm_chunked", ops::WeightFormat::kInt8, 0, 9, 33, 320},
    {"int4_g32_gemv_wide", ops::WeightFormat::kInt4, 32, 1, 1030, 4096},
    {"int4_g128_gemm_wide", ops::WeightFormat::kInt4, 128, 6, 5, 8192},
    // The element kernel: widths that are no whole number of chunks, and a misaligned x.
    {"f32_gemv_odd", ops::WeightFormat::kF32, 0, 1, 7, 101},
    {"bf16_gemm_odd", ops::WeightFormat::kBF16, 0, 3, 21, 203},
    {"int4_g64_gemv_misaligned_x", ops::WeightFormat::kInt4, 64, 1, 17, 256, 1},
    {"bf16_gemm_misaligned_x", ops::WeightFormat::kBF16, 0, 2, 9, 64, 3},
};

// Largest |gpu - cpu| relative to sum_k |x_k w_k|: both sum in fp32, in different orders.
constexpr double kTolerance = 4e-6;

using test::succeeded;
using test::upload;

class KernelQuantTest : public ::testing::TestWithParam<QuantTwinCase> {
 protected:
  void SetUp() override {
    const Result<int> count = device_count();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();
  }
};

TEST_P(KernelQuantTest, MatchesTheCpuTwin) {
  const QuantTwinCase& c = GetParam();
  std::mt19937_64 rng(31);
  const auto x = test::random_floats(static_cast<size_t>(c.n * c.cols), rng, -1, 1);
  const auto w = test::random_floats(static_cast<size_t>(c.rows * c.cols), rng, -1, 1);
  Result<ops::QuantizedMatrix> q = ops::quantize_weights(w.data(), c.rows, c.cols, c.format,
                                                         c.group);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  std::vector<float> expected(static_cast<size_t>(c.n * c.rows));
  ops::quantized_linear(x.data(), q->view(), expected.data(), c.n, ops::CpuPath::kScalar);

  std::vector<float> x_storage(static_cast<size_t>(c.x_offset), 0.0f);
  x_storage.insert(x_storage.end(), x.begin(), x.end());
  const DeviceBuffer dx = upload(x_storage.data(), x_storage.size());
  const DeviceBuffer dv = upload(q->values.data(), q->values.size());
  const DeviceBuffer ds = upload(q->scales.data(), q->scales.size());
  ops::QuantView dw = q->view();
  dw.values = dv.as<uint8_t>();
  dw.scales = ds.as<float>();
  test::Guarded<float> y(expected.size());
  Result<DeviceBuffer> dy = DeviceBuffer::allocate(y.storage_bytes());
  ASSERT_TRUE(succeeded(dy.status()));
  ASSERT_TRUE(succeeded(copy_to_device(dy->data(), y.storage(), y.storage_bytes())));
  ASSERT_TRUE(succeeded(kernels::quantized_linear(dx.as<float>() + c.x_offset, dw,
                                         dy->as<float>() + test::kGuardElements, c.n)));
  ASSERT_TRUE(succeeded(synchronize(nullptr)));
  ASSERT_TRUE(succeeded(copy_to_host(y.storage(), dy->data(), y.storage_bytes())));
  EXPECT_TRUE(y.guards_intact()) << "wrote outside y";

  std::vector<float> deq(w.size());
  ops::dequantize_weights(q->view(), deq.data());
  for (int64_t t = 0; t < c.n; ++t) {
    for (int64_t r = 0; r < c.rows; ++r) {
      double scale = 1e-30;
      for (int64_t k = 0; k < c.cols; ++k) {
        scale += std::fabs(double{x[t * c.cols + k]} * deq[r * c.cols + k]);
      }
      const size_t i = static_cast<size_t>(t * c.rows + r);
      ASSERT_LE(std::fabs(y[i] - expected[i]) / scale, kTolerance) << "t=" << t << " r=" << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kernels, KernelQuantTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(KernelQuantArgsTest, RefusesABadGroupSizeAndNullBuffersByName) {
  ops::QuantView w{ops::WeightFormat::kInt4, 4, 96, 48, nullptr, nullptr};
  Status s = kernels::quantized_linear(nullptr, w, nullptr, 1);
  EXPECT_NE(s.message().find("group size 48"), std::string::npos) << s.message();
  w.group_size = 32;
  s = kernels::quantized_linear(nullptr, w, nullptr, 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("x"), std::string::npos) << s.message();
}

TEST(KernelQuantArgsTest, RefusesMoreThan65535RowsOfX) {
  // Host buffers: the checks answer before anything reaches a device.
  constexpr int64_t kRows = 4, kCols = 32, kN = 65536;
  std::vector<float> x(static_cast<size_t>(kN * kCols)), y(static_cast<size_t>(kN * kRows));
  std::vector<uint8_t> values(static_cast<size_t>(kRows * kCols));
  std::vector<float> scales(kRows);
  const ops::QuantView w{ops::WeightFormat::kInt8, kRows, kCols, kCols, values.data(),
                         scales.data()};
  const Status s = kernels::quantized_linear(x.data(), w, y.data(), kN);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("65535"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ms::kernels
