// The CUDA backend (kernels/cuda_backend.h) through the backend table (backend_cases.h), and
// its runtime (kernels/cuda_runtime.h): on a GPU every op of the seam must match lib/ops within
// the f32 tolerance below and repeat its bits when run twice; without one each device test
// skips with the reason, and the refusals that need no device are checked here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend_cases.h"
#include "host_facing_backend.h"
#include "kernels/cuda_backend.h"
#include "kernels/cuda_runtime.h"
#include "kernels/device.h"
#include "ops/backend_registry.h"

namespace ms::kernels {
namespace {

// A small arena: the table's buffers are a few KiB.
std::unique_ptr<CudaRuntime> open_runtime(size_t arena_bytes = 64 << 20) {
  CudaRuntimeOptions options;
  options.arena_bytes = arena_bytes;
  Result<std::unique_ptr<CudaRuntime>> rt = CudaRuntime::create(options);
  return rt.ok() ? std::move(*rt) : nullptr;
}

#define SKIP_WITHOUT_DEVICE()                                                          \
  do {                                                                                 \
    const Result<int> count = device_count();                                          \
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();   \
  } while (0)

// One case of the table on a device backend: within the f32 tolerance of the reference, and the
// same bits when run twice.
void expect_matches(const ops::OpCase& c, ops::Backend* be) {
  const ops::Floats want = c.run(nullptr);
  const ops::Floats got = c.run(be);
  const ops::Floats again = c.run(be);
  ASSERT_EQ(got.size(), want.size()) << c.name;
  // f32 on both sides; only the summation order differs (cuBLAS's, the kernels' trees), so
  // |got - want| <= 1e-5 * max|want| + 1e-4 * |want|, the normalized error of kernels/.
  float scale = 0;
  for (const float w : want) scale = std::max(scale, std::fabs(w));
  for (size_t i = 0; i < want.size(); ++i) {
    const float bound = 1e-5f * scale + 1e-4f * std::fabs(want[i]);
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << c.name << " element " << i;
    } else {
      EXPECT_LE(std::fabs(got[i] - want[i]), bound)
          << c.name << " element " << i << ": " << got[i] << " vs " << want[i];
    }
    EXPECT_EQ(std::memcmp(&got[i], &again[i], sizeof(float)), 0)
        << c.name << " element " << i << " differs between two runs";
  }
}

TEST(CudaBackend, EveryOpMatchesTheCpuReferenceAndRepeatsItsBits) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaRuntime> rt = open_runtime();
  ASSERT_NE(rt, nullptr);
  // Both precisions: at bf16 the reference reads the matmul-class inputs through bf16, and the
  // products of two bf16 values are exact in fp32, so the same tolerance holds.
  for (const ops::MatmulPrecision precision :
       {ops::MatmulPrecision::kF32, ops::MatmulPrecision::kBf16}) {
    SCOPED_TRACE(ops::matmul_precision_name(precision));
    std::unique_ptr<ops::Backend> cuda = make_cuda_backend(*rt, precision);
    std::unique_ptr<ops::Backend> be = ops::host_facing(*cuda);
    for (const ops::OpCase& c : ops::backend_cases(precision)) expect_matches(c, be.get());
  }
}

TEST(CudaRuntime, ArenaServesFreesAndNamesTheSizesWhenFull) {
  SKIP_WITHOUT_DEVICE();
  std::unique_ptr<CudaRuntime> rt = open_runtime(1 << 20);
  ASSERT_NE(rt, nullptr);
  const ms::Stream stream = rt->default_stream();
  {
    Result<Buffer> a = rt->allocator().allocate(512 << 10, stream);
    ASSERT_TRUE(a.ok()) << a.status().message();
    EXPECT_EQ(a->device(), rt->device());
    EXPECT_EQ(rt->usage().in_use, size_t{512} << 10);
    Result<Buffer> b = rt->allocator().allocate(768 << 10, stream);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find("out of arena memory allocating 0.8 MiB"),
              std::string::npos)
        << b.status().message();
  }
  EXPECT_EQ(rt->usage().in_use, 0u);
  EXPECT_EQ(rt->usage().peak, size_t{512} << 10);
  // A round trip through the device.
  std::vector<float> host(1000), back(1000, 0.0f);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i) * 0.5f;
  Result<Tensor> device = empty_tensor(rt->allocator(), DType::kF32, {1000}, stream);
  ASSERT_TRUE(device.ok());
  Tensor in = Tensor::view_of(DType::kF32, {1000}, host.data());
  Tensor out = Tensor::view_of(DType::kF32, {1000}, back.data());
  ASSERT_TRUE(rt->copy(*device, in, stream).ok());
  ASSERT_TRUE(rt->copy(out, *device, stream).ok());
  ASSERT_TRUE(rt->synchronize(stream).ok());
  EXPECT_EQ(host, back);
}

TEST(CudaRuntime, WithoutADeviceTheRegisteredBackendSaysWhy) {
  register_cuda_backend();
  const Result<ops::Backend*> be = ops::backend_for(Device::cuda(0));
  if (device_count().ok()) {
    EXPECT_TRUE(be.ok()) << be.status().message();
    return;
  }
  ASSERT_FALSE(be.ok());
  EXPECT_EQ(be.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(be.status().message().find("cuda:0 cannot be used"), std::string::npos)
      << be.status().message();
}

TEST(CudaRuntime, AMissingOrdinalIsRefused) {
  CudaRuntimeOptions options;
  options.ordinal = 4096;
  const Result<std::unique_ptr<CudaRuntime>> rt = CudaRuntime::create(options);
  ASSERT_FALSE(rt.ok());
  EXPECT_EQ(rt.status().code(), StatusCode::kUnavailable);
}

}  // namespace
}  // namespace ms::kernels
