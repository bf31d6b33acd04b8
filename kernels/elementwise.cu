// Grid-stride elementwise kernels. Arithmetic goes through __fadd_rn/__fmul_rn so nvcc cannot
// contract a*x+y into an FMA: the results then equal the CPU twins bit for bit.
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "kernels/elementwise.cuh"
#include "kernels/launch.h"

namespace ms::kernels {

static __device__ size_t first_index() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
static __device__ size_t grid_stride() { return static_cast<size_t>(gridDim.x) * blockDim.x; }

static __global__ void add_kernel(const float* a, const float* b, float* out, size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride()) out[i] = __fadd_rn(a[i], b[i]);
}

static __global__ void scale_kernel(const float* x, float alpha, float* out, size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride()) out[i] = __fmul_rn(alpha, x[i]);
}

static __global__ void axpy_kernel(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = first_index(); i < n; i += grid_stride()) {
    y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
  }
}

static unsigned grid_for(size_t n) { return blocks_for(n, kMaxElementwiseBlocks); }

Status add(const float* a, const float* b, float* out, size_t n, Stream stream) {
  constexpr const char* kOp = "kernels::add";
  MS_RETURN_IF_ERROR(check_buffer(kOp, "a", a, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "b", b, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, n));
  MS_RETURN_IF_ERROR(check_same_or_disjoint(kOp, "out", out, "a", a, n * sizeof(float)));
  MS_RETURN_IF_ERROR(check_same_or_disjoint(kOp, "out", out, "b", b, n * sizeof(float)));
  if (n == 0) return Status::OK();
  add_kernel<<<grid_for(n), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(a, b, out, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status scale(const float* x, float alpha, float* out, size_t n, Stream stream) {
  constexpr const char* kOp = "kernels::scale";
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, n));
  MS_RETURN_IF_ERROR(check_same_or_disjoint(kOp, "out", out, "x", x, n * sizeof(float)));
  if (n == 0) return Status::OK();
  scale_kernel<<<grid_for(n), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, alpha, out,
                                                                                     n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status axpy(float alpha, const float* x, float* y, size_t n, Stream stream) {
  constexpr const char* kOp = "kernels::axpy";
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "y", y, n));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "x", x, n * sizeof(float), "y", y, n * sizeof(float)));
  if (n == 0) return Status::OK();
  axpy_kernel<<<grid_for(n), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(alpha, x, y, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
