// Memory kernels: grid-stride loops over elements, or one warp per row for the row ops; every
// value is written once by one thread, so the results are the CPU twin's bits. add_to_columns
// adds with __fadd_rn, the one rounding the CPU does.
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/memory_ops.cuh"

namespace ms::kernels {
namespace {

__device__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__global__ void fill_kernel(float* x, int64_t n, float value) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) x[i] = value;
}

constexpr unsigned kWarpSize = 32;
constexpr unsigned kWarpsPerBlock = kBlockThreads / kWarpSize;
__device__ int64_t first_warp() {
  return static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
}
__device__ int64_t warp_stride() { return static_cast<int64_t>(gridDim.x) * kWarpsPerBlock; }

// The row kernels take one warp per row: lanes stride over the width, so loads and stores along
// a row are coalesced and no element index is divided by the width.
__global__ void gather_rows_kernel(const float* src, const int64_t* rows, int64_t count,
                                   int64_t width, float* dst) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t i = first_warp(); i < count; i += warp_stride()) {
    const float* from = src + rows[i] * width;
    float* to = dst + i * width;
    for (int64_t c = lane; c < width; c += kWarpSize) to[c] = from[c];
  }
}

__global__ void scatter_rows_kernel(const float* src, const int64_t* rows, int64_t count,
                                    int64_t width, float* dst) {
  const unsigned lane = threadIdx.x % kWarpSize;
  for (int64_t i = first_warp(); i < count; i += warp_stride()) {
    const float* from = src + i * width;
    float* to = dst + rows[i] * width;
    for (int64_t c = lane; c < width; c += kWarpSize) to[c] = from[c];
  }
}

__global__ void add_to_columns_kernel(float* x, const float* column, int64_t rows, int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    x[i] = __fadd_rn(x[i], column[i % cols]);
  }
}

unsigned grid_for(int64_t n) { return blocks_for(static_cast<size_t>(n), kMaxElementwiseBlocks); }
// Blocks for one warp per row.
unsigned warp_grid_for(int64_t rows) {
  return grid_for(rows * static_cast<int64_t>(kWarpSize));
}

// Checks shared by gather_rows and scatter_rows: the sizes and the buffers they touch. Only the
// row-table side (count x width) is known; the other side's extent follows from the indices.
Status check_row_op(const char* op, const float* src, const int64_t* rows, int64_t count,
                    int64_t width, float* dst) {
  MS_RETURN_IF_ERROR(check_not_negative(op, "count", count));
  MS_RETURN_IF_ERROR(check_not_negative(op, "width", width));
  const auto elements = static_cast<size_t>(count * width);
  MS_RETURN_IF_ERROR(check_buffer(op, "src", src, elements));
  MS_RETURN_IF_ERROR(check_buffer(op, "rows", rows, static_cast<size_t>(count)));
  return check_buffer(op, "dst", dst, elements);
}

}  // namespace

Status fill(float* x, int64_t n, float value, Stream stream) {
  constexpr const char* kOp = "kernels::fill";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, static_cast<size_t>(n)));
  if (n == 0) return Status::OK();
  fill_kernel<<<grid_for(n), kBlockThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, n, value);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status copy(const float* src, float* dst, int64_t n, Stream stream) {
  constexpr const char* kOp = "kernels::copy";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "src", src, static_cast<size_t>(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "dst", dst, static_cast<size_t>(n)));
  if (n == 0 || src == dst) return Status::OK();
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  if (check_disjoint(kOp, "src", src, bytes, "dst", dst, bytes).ok()) {
    MS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream));
    return Status::OK();
  }
  // Overlapping ranges: stage the source so no element is read after it was overwritten.
  void* staging = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&staging, bytes, cuda_stream));
  const cudaError_t first =
      cudaMemcpyAsync(staging, src, bytes, cudaMemcpyDeviceToDevice, cuda_stream);
  const cudaError_t second =
      first == cudaSuccess
          ? cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyDeviceToDevice, cuda_stream)
          : first;
  MS_CUDA_CHECK(cudaFreeAsync(staging, cuda_stream));
  MS_CUDA_CHECK(second);
  return Status::OK();
}

Status gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                   float* dst, Stream stream) {
  MS_RETURN_IF_ERROR(check_row_op("kernels::gather_rows", src, rows, count, width, dst));
  const int64_t n = count * width;
  if (n == 0) return Status::OK();
  gather_rows_kernel<<<warp_grid_for(count), kBlockThreads, 0,
                           static_cast<cudaStream_t>(stream)>>>(src, rows, count, width, dst);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                    float* dst, Stream stream) {
  MS_RETURN_IF_ERROR(check_row_op("kernels::scatter_rows", src, rows, count, width, dst));
  const int64_t n = count * width;
  if (n == 0) return Status::OK();
  scatter_rows_kernel<<<warp_grid_for(count), kBlockThreads, 0,
                            static_cast<cudaStream_t>(stream)>>>(src, rows, count, width, dst);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status add_to_columns(float* x, const float* column, int64_t rows, int64_t cols,
                      Stream stream) {
  constexpr const char* kOp = "kernels::add_to_columns";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "rows", rows));
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "cols", cols));
  const auto elements = static_cast<size_t>(rows * cols);
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, elements));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "column", column, static_cast<size_t>(cols)));
  MS_RETURN_IF_ERROR(check_disjoint(kOp, "x", x, elements * sizeof(float), "column", column,
                                    static_cast<size_t>(cols) * sizeof(float)));
  if (elements == 0) return Status::OK();
  add_to_columns_kernel<<<grid_for(rows * cols), kBlockThreads, 0,
                          static_cast<cudaStream_t>(stream)>>>(x, column, rows, cols);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

}  // namespace ms::kernels
