// What the kernels' entry points and device helpers do before any GPU work: argument checks,
// empty inputs, error mapping, and how "no GPU here" is reported. Nothing here needs a GPU, so
// these run on every machine with nvcc, with or without a device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kernels/cast.cuh"
#include "core/cuda_check.h"
#include "kernels/device.h"
#include "kernels/elementwise.cuh"
#include "kernels/gemm.cuh"
#include "kernels/launch.h"
#include "kernels/reduce.cuh"

namespace ms::kernels {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Host memory stands in for device pointers: every call below fails its checks before launch.
alignas(64) float host_floats[64];

TEST(KernelArgsTest, NullPointerIsInvalidArgumentNamingTheOperand) {
  const Status s = add(nullptr, host_floats, host_floats + 8, 8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "kernels::add: a is null")) << s.message();
}

TEST(KernelArgsTest, MisalignedPointerIsInvalidArgument) {
  const auto* misaligned =
      reinterpret_cast<const float*>(reinterpret_cast<const char*>(host_floats) + 1);
  const Status s = scale(misaligned, 2.0f, host_floats + 16, 4);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "x is not aligned")) << s.message();
}

TEST(KernelArgsTest, PartialOverlapIsRejectedButInPlaceIsAllowedPastTheChecks) {
  const Status shifted = add(host_floats, host_floats + 32, host_floats + 1, 8);
  EXPECT_EQ(shifted.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(shifted.message(), "partially overlap")) << shifted.message();
  const Status axpy_overlap = axpy(1.0f, host_floats, host_floats + 4, 8);
  EXPECT_EQ(axpy_overlap.code(), StatusCode::kInvalidArgument);
  const Status cast_overlap = f32_to_bf16(host_floats, reinterpret_cast<bf16*>(host_floats + 2), 8);
  EXPECT_EQ(cast_overlap.code(), StatusCode::kInvalidArgument);
}

TEST(KernelArgsTest, EmptyElementwiseAndCastCallsSucceedWithoutTouchingCuda) {
  EXPECT_TRUE(add(nullptr, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(scale(nullptr, 1.0f, nullptr, 0).ok());
  EXPECT_TRUE(axpy(1.0f, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(f32_to_bf16(nullptr, nullptr, 0).ok());
  EXPECT_TRUE(f16_to_f32(nullptr, nullptr, 0).ok());
}

TEST(KernelArgsTest, ReductionNeedsAnOutputEvenForEmptyInput) {
  const Status s = sum(static_cast<const float*>(nullptr), 0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "kernels::sum: out is null")) << s.message();
}

TEST(KernelArgsTest, GemmShapeErrorsComeBeforeAnyCudaCall) {
  const Status bad_k = kernels::sgemm(Transpose::kNo, Transpose::kNo, 2, 2, 0, 1.0f, host_floats, 2,
                                      host_floats, 2, 0.0f, host_floats + 16, 2);
  EXPECT_EQ(bad_k.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(bad_k.message(), "k = 0")) << bad_k.message();
  const Status null_c = kernels::gemm_bf16(
      Transpose::kNo, Transpose::kNo, 2, 2, 2, 1.0f, reinterpret_cast<const bf16*>(host_floats), 2,
      reinterpret_cast<const bf16*>(host_floats), 2, 0.0f, nullptr, 2);
  EXPECT_EQ(null_c.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(null_c.message(), "c is null")) << null_c.message();
  EXPECT_TRUE(kernels::sgemm(Transpose::kNo, Transpose::kNo, 0, 2, 2, 1.0f, nullptr, 2, nullptr, 2,
                             0.0f, nullptr, 2)
                  .ok());
}

TEST(KernelArgsTest, BlocksCoverTheInputWithinLimits) {
  EXPECT_EQ(blocks_for(0, 64), 1u);
  EXPECT_EQ(blocks_for(kBlockThreads, 64), 1u);
  EXPECT_EQ(blocks_for(kBlockThreads + 1, 64), 2u);
  EXPECT_EQ(blocks_for(size_t{1} << 40, 64), 64u);
}

Status fails_with(cudaError_t err) {
  MS_CUDA_CHECK(err);
  return Status::OK();
}

TEST(CudaCheckTest, NoDeviceErrorsAreUnavailableAndOthersInternal) {
  const Status none = fails_with(cudaErrorNoDevice);
  EXPECT_EQ(none.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(contains(none.message(), "CUDA call 'err' failed at tests/ops/kernel_args_test.cc"))
      << none.message();
  EXPECT_TRUE(contains(none.message(), "cudaErrorNoDevice")) << none.message();
  EXPECT_EQ(fails_with(cudaErrorInsufficientDriver).code(), StatusCode::kUnavailable);
  EXPECT_EQ(fails_with(cudaErrorMemoryAllocation).code(), StatusCode::kInternal);
  EXPECT_TRUE(fails_with(cudaSuccess).ok());
}

TEST(DeviceTest, DeviceCountIsPositiveOrUnavailableWithTheReason) {
  const Result<int> count = device_count();
  if (count.ok()) {
    EXPECT_GT(*count, 0);
    const Result<std::string> name = device_name(0);
    ASSERT_TRUE(name.ok()) << name.status().to_string();
    EXPECT_FALSE(name->empty());
    EXPECT_EQ(device_name(*count).status().code(), StatusCode::kInvalidArgument);
  } else {
    EXPECT_EQ(count.status().code(), StatusCode::kUnavailable);
    EXPECT_FALSE(count.status().message().empty());
    EXPECT_EQ(device_name(0).status().code(), StatusCode::kUnavailable);
  }
}

TEST(DeviceTest, AllocationWorksOnlyWithADevice) {
  Result<DeviceBuffer> buffer = DeviceBuffer::allocate(256);
  if (device_count().ok()) {
    ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
    EXPECT_NE(buffer->data(), nullptr);
    EXPECT_EQ(buffer->bytes(), 256u);
  } else {
    EXPECT_EQ(buffer.status().code(), StatusCode::kUnavailable) << buffer.status().to_string();
  }
  EXPECT_TRUE(device_alloc(0).ok());
  EXPECT_TRUE(device_free(nullptr).ok());
  EXPECT_TRUE(copy_to_device(nullptr, nullptr, 0).ok());
}

}  // namespace
}  // namespace ms::kernels
