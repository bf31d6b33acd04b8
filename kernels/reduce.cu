// Two-pass block reductions. Pass 1: each of B blocks folds a grid-stride slice of x into one
// partial (per-thread running fold, then a warp-shuffle tree, then a tree over warp results).
// Pass 2: one block folds the B partials the same way. B depends only on n, so the order of
// every operation is fixed and the result is reproducible bit for bit.
#include <cuda_runtime.h>

#include <cmath>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/reduce.cuh"

namespace ms::kernels {
namespace {

// Each thread of pass 1 folds about this many elements before the tree steps.
constexpr size_t kElementsPerThread = 8;
// At most this many partials, so pass 2 stays one small block.
constexpr unsigned kMaxReduceBlocks = 1024;
constexpr unsigned kWarpSize = 32;

__device__ float widen(float v) { return v; }
__device__ float widen(bf16 v) { return __uint_as_float(static_cast<unsigned>(v.bits) << 16); }

// An op is a per-element map (applied in pass 1 only) and an associative fold with identity.
struct SumOp {
  static __device__ float identity() { return 0.0f; }
  static __device__ float map(float v) { return v; }
  static __device__ float fold(float a, float b) { return a + b; }
};
struct SumOfSquaresOp {
  static __device__ float identity() { return 0.0f; }
  static __device__ float map(float v) { return v * v; }
  static __device__ float fold(float a, float b) { return a + b; }
};
// NaN wins: if b is NaN, a > b is false and b is returned; if a is NaN, a is returned.
struct MaxOp {
  static __device__ float identity() { return -INFINITY; }
  static __device__ float map(float v) { return v; }
  static __device__ float fold(float a, float b) { return (a > b || isnan(a)) ? a : b; }
};
struct AbsMaxOp {
  static __device__ float identity() { return 0.0f; }
  static __device__ float map(float v) { return fabsf(v); }
  static __device__ float fold(float a, float b) { return MaxOp::fold(a, b); }
};

template <typename Op>
__device__ float warp_fold(float v) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = Op::fold(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Folds one value per thread of the block; the result is valid in thread 0.
template <typename Op>
__device__ float block_fold(float v) {
  __shared__ float warp_results[kBlockThreads / kWarpSize];
  const unsigned lane = threadIdx.x % kWarpSize;
  const unsigned warp = threadIdx.x / kWarpSize;
  v = warp_fold<Op>(v);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < blockDim.x / kWarpSize ? warp_results[lane] : Op::identity();
    v = warp_fold<Op>(v);
  }
  return v;
}

// Pass 1: block b writes the fold of Op::map over its grid-stride slice to partials[b].
template <typename Op, typename T>
__global__ void fold_slices(const T* x, size_t n, float* partials) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  float acc = Op::identity();
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc = Op::fold(acc, Op::map(widen(x[i])));
  }
  acc = block_fold<Op>(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pass 2 (one block): folds `count` partials into *out.
template <typename Op>
__global__ void fold_partials(const float* partials, unsigned count, float* out) {
  float acc = Op::identity();
  for (unsigned i = threadIdx.x; i < count; i += blockDim.x) acc = Op::fold(acc, partials[i]);
  acc = block_fold<Op>(acc);
  if (threadIdx.x == 0) *out = acc;
}

unsigned reduce_blocks_for(size_t n) {
  return blocks_for((n + kElementsPerThread - 1) / kElementsPerThread, kMaxReduceBlocks);
}

// Runs both passes with `partials` as workspace for `blocks` values.
template <typename Op, typename T>
Status launch_two_passes(const T* x, size_t n, float* out, unsigned blocks, float* partials,
                         cudaStream_t stream) {
  fold_slices<Op, T><<<blocks, kBlockThreads, 0, stream>>>(x, n, partials);
  MS_CUDA_CHECK(cudaGetLastError());
  fold_partials<Op><<<1, kBlockThreads, 0, stream>>>(partials, blocks, out);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

template <typename Op, typename T>
Status reduce(const char* op, const T* x, size_t n, float* out, Stream stream) {
  MS_RETURN_IF_ERROR(check_buffer(op, "x", x, n));
  MS_RETURN_IF_ERROR(check_buffer(op, "out", out, 1));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const unsigned blocks = reduce_blocks_for(n);
  if (blocks == 1) {  // one block folds everything straight into *out
    fold_slices<Op, T><<<1, kBlockThreads, 0, cuda_stream>>>(x, n, out);
    MS_CUDA_CHECK(cudaGetLastError());
    return Status::OK();
  }
  void* workspace = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, blocks * sizeof(float), cuda_stream));
  const Status launched =
      launch_two_passes<Op>(x, n, out, blocks, static_cast<float*>(workspace), cuda_stream);
  MS_CUDA_CHECK(cudaFreeAsync(workspace, cuda_stream));
  return launched;
}

}  // namespace

Status sum(const float* x, size_t n, float* out, Stream stream) {
  return reduce<SumOp>("kernels::sum", x, n, out, stream);
}
Status sum(const bf16* x, size_t n, float* out, Stream stream) {
  return reduce<SumOp>("kernels::sum", x, n, out, stream);
}
Status sum_of_squares(const float* x, size_t n, float* out, Stream stream) {
  return reduce<SumOfSquaresOp>("kernels::sum_of_squares", x, n, out, stream);
}
Status sum_of_squares(const bf16* x, size_t n, float* out, Stream stream) {
  return reduce<SumOfSquaresOp>("kernels::sum_of_squares", x, n, out, stream);
}
Status max(const float* x, size_t n, float* out, Stream stream) {
  return reduce<MaxOp>("kernels::max", x, n, out, stream);
}
Status max(const bf16* x, size_t n, float* out, Stream stream) {
  return reduce<MaxOp>("kernels::max", x, n, out, stream);
}
Status absmax(const float* x, size_t n, float* out, Stream stream) {
  return reduce<AbsMaxOp>("kernels::absmax", x, n, out, stream);
}
Status absmax(const bf16* x, size_t n, float* out, Stream stream) {
  return reduce<AbsMaxOp>("kernels::absmax", x, n, out, stream);
}

}  // namespace ms::kernels
