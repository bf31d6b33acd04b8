// AdamW and LAMB element updates, and the f64 sums of squares (LAMB's norms, the global gradient
// norm). The updates spell out every fp32 rounding in the CPU's order (optimizer.cc) so nvcc
// cannot contract a product and a sum into an FMA. The sums are two passes: B blocks (B fixed by
// n) each fold a grid-stride slice in double, per thread then through a warp-shuffle tree and a
// tree over the warps; one block then folds the B partials the same way. No atomics, so the
// same input gives the same bits on every run.
#include <cuda_runtime.h>

#include <string>

#include "core/cuda_check.h"
#include "kernels/launch.h"
#include "kernels/optimizer.cuh"

namespace ms::kernels {
namespace {

using ops::AdamCoefficients;

// Each thread of a reduction's first pass folds about this many elements.
constexpr size_t kElementsPerThread = 8;
// At most this many partials per value, so the second pass stays one small block.
constexpr unsigned kMaxReduceBlocks = 1024;
constexpr unsigned kWarpSize = 32;
constexpr unsigned kWarps = kBlockThreads / kWarpSize;

__device__ int64_t first_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ int64_t grid_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ double warp_sum(double v) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = __dadd_rn(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Sums one value per thread of the block in a fixed tree; the result is valid in thread 0.
// Ends with a barrier, so the block may call it again right away.
__device__ double block_sum(double v) {
  __shared__ double warp_results[kWarps];
  const unsigned lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  v = warp_sum(v);
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_sum(lane < kWarps ? warp_results[lane] : 0.0);
  __syncthreads();
  return v;
}

__device__ double square(float x) { return __dmul_rn(static_cast<double>(x), x); }

// The moment step shared by AdamW and LAMB: m, v from the scaled gradient, in ops' order.
struct Moments {
  float m, v;
};
__device__ Moments step_moments(const AdamCoefficients& c, float g, float m, float v) {
  const float grad = __fmul_rn(g, c.grad_scale);
  return {__fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, grad)),
          __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(__fmul_rn(c.one_minus_beta2, grad), grad))};
}
// sqrt(v) * inv_sqrt_bias2 + eps.
__device__ float adam_denominator(const AdamCoefficients& c, float v) {
  return __fadd_rn(__fmul_rn(__fsqrt_rn(v), c.inv_sqrt_bias2), c.eps);
}

__global__ void adamw_kernel(AdamCoefficients c, bool weight_decay, float* w, const float* g,
                             float* m, float* v, int64_t n) {
  const float decay = weight_decay ? __fsub_rn(1.0f, __fmul_rn(c.lr, c.weight_decay)) : 1.0f;
  const float step_size = __fmul_rn(c.lr, c.inv_bias1);
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const Moments next = step_moments(c, g[i], m[i], v[i]);
    m[i] = next.m;
    v[i] = next.v;
    const float ratio = __fdiv_rn(next.m, adam_denominator(c, next.v));
    w[i] = __fsub_rn(__fmul_rn(w[i], decay), __fmul_rn(step_size, ratio));
  }
}

// LAMB's first pass; block b writes its partial sums of w^2 and d^2 to norms[2b], norms[2b + 1].
__global__ void lamb_direction_kernel(AdamCoefficients c, bool weight_decay, const float* w,
                                      const float* g, float* m, float* v, float* d, int64_t n,
                                      double* norms) {
  const float decay = weight_decay ? c.weight_decay : 0.0f;
  double w_sq = 0, d_sq = 0;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const Moments next = step_moments(c, g[i], m[i], v[i]);
    m[i] = next.m;
    v[i] = next.v;
    const float adam = __fdiv_rn(__fmul_rn(next.m, c.inv_bias1), adam_denominator(c, next.v));
    const float wi = w[i];
    const float di = __fadd_rn(adam, __fmul_rn(decay, wi));
    d[i] = di;
    w_sq = __dadd_rn(w_sq, square(wi));
    d_sq = __dadd_rn(d_sq, square(di));
  }
  w_sq = block_sum(w_sq);
  d_sq = block_sum(d_sq);
  if (threadIdx.x == 0) {
    norms[2 * blockIdx.x] = w_sq;
    norms[2 * blockIdx.x + 1] = d_sq;
  }
}

__global__ void lamb_update_kernel(float step, const float* d, float* w, int64_t n) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    w[i] = __fsub_rn(w[i], __fmul_rn(step, d[i]));
  }
}

// Block b writes the sum of squares of its grid-stride slice to partials[b].
__global__ void sum_of_squares_kernel(const float* x, int64_t n, double* partials) {
  double acc = 0;
  for (int64_t i = first_index(); i < n; i += grid_stride()) acc = __dadd_rn(acc, square(x[i]));
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Second pass (one block): partials holds `count` groups of `values` sums, group b from block b;
// out[k] = the sum over the groups of partials[b * values + k].
__global__ void sum_partials_kernel(const double* partials, unsigned count, unsigned values,
                                    double* out) {
  for (unsigned k = 0; k < values; ++k) {
    double acc = 0;
    for (unsigned b = threadIdx.x; b < count; b += blockDim.x) {
      acc = __dadd_rn(acc, partials[b * values + k]);
    }
    acc = block_sum(acc);
    if (threadIdx.x == 0) out[k] = acc;
  }
}

unsigned reduce_blocks_for(int64_t n) {
  const auto per_thread = (static_cast<size_t>(n) + kElementsPerThread - 1) / kElementsPerThread;
  return blocks_for(per_thread, kMaxReduceBlocks);
}

// Checks that each named array of n floats is non-null (n > 0), aligned, and disjoint from the
// others.
struct NamedArray {
  const char* name;
  const float* data;
};
template <size_t N>
Status check_arrays(const char* op, const NamedArray (&arrays)[N], int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  for (size_t i = 0; i < N; ++i) {
    MS_RETURN_IF_ERROR(check_buffer(op, arrays[i].name, arrays[i].data, static_cast<size_t>(n)));
    for (size_t j = 0; j < i; ++j) {
      MS_RETURN_IF_ERROR(check_disjoint(op, arrays[j].name, arrays[j].data, bytes,
                                        arrays[i].name, arrays[i].data, bytes));
    }
  }
  return Status::OK();
}

// Runs a first pass on `blocks` blocks that writes `values` partials per block, then folds them
// into out[0, values). One block writes straight into `out`; more use a workspace from the
// stream-ordered allocator, released on the same stream.
template <typename FirstPass>
Status two_pass_sum(unsigned blocks, unsigned values, double* out, cudaStream_t stream,
                    const FirstPass& first_pass) {
  if (blocks == 1) {
    first_pass(out);
    MS_CUDA_CHECK(cudaGetLastError());
    return Status::OK();
  }
  void* workspace = nullptr;
  MS_CUDA_CHECK(cudaMallocAsync(&workspace, sizeof(double) * blocks * values, stream));
  auto* partials = static_cast<double*>(workspace);
  first_pass(partials);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    sum_partials_kernel<<<1, kBlockThreads, 0, stream>>>(partials, blocks, values, out);
    launched = cudaGetLastError();
  }
  MS_CUDA_CHECK(cudaFreeAsync(workspace, stream));
  MS_CUDA_CHECK(launched);
  return Status::OK();
}

}  // namespace

Status adamw_update(const AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                    float* m, float* v, int64_t n, Stream stream) {
  constexpr const char* kOp = "kernels::adamw_update";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_arrays(kOp, {{"w", w}, {"g", g}, {"m", m}, {"v", v}}, n));
  if (n == 0) return Status::OK();
  adamw_kernel<<<blocks_for(static_cast<size_t>(n), kMaxElementwiseBlocks), kBlockThreads, 0,
                 static_cast<cudaStream_t>(stream)>>>(c, weight_decay, w, g, m, v, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status lamb_direction(const AdamCoefficients& c, bool weight_decay, const float* w,
                      const float* g, float* m, float* v, float* d, double* norms, int64_t n,
                      Stream stream) {
  constexpr const char* kOp = "kernels::lamb_direction";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(
      check_arrays(kOp, {{"w", w}, {"g", g}, {"m", m}, {"v", v}, {"d", d}}, n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "norms", norms, 2));
  // n == 0 still runs one block: the norms are overwritten with zeros, as on the CPU.
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const unsigned blocks = reduce_blocks_for(n);
  return two_pass_sum(blocks, 2, norms, cuda_stream, [&](double* partials) {
    lamb_direction_kernel<<<blocks, kBlockThreads, 0, cuda_stream>>>(c, weight_decay, w, g, m, v,
                                                                     d, n, partials);
  });
}

Status lamb_update(float step, const float* d, float* w, int64_t n, Stream stream) {
  constexpr const char* kOp = "kernels::lamb_update";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_arrays(kOp, {{"d", d}, {"w", w}}, n));
  if (n == 0) return Status::OK();
  lamb_update_kernel<<<blocks_for(static_cast<size_t>(n), kMaxElementwiseBlocks), kBlockThreads,
                       0, static_cast<cudaStream_t>(stream)>>>(step, d, w, n);
  MS_CUDA_CHECK(cudaGetLastError());
  return Status::OK();
}

Status sum_of_squares_f64(const float* x, int64_t n, double* out, Stream stream) {
  constexpr const char* kOp = "kernels::sum_of_squares_f64";
  MS_RETURN_IF_ERROR(check_not_negative(kOp, "n", n));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "x", x, static_cast<size_t>(n)));
  MS_RETURN_IF_ERROR(check_buffer(kOp, "out", out, 1));
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const unsigned blocks = reduce_blocks_for(n);
  return two_pass_sum(blocks, 1, out, cuda_stream, [&](double* partials) {
    sum_of_squares_kernel<<<blocks, kBlockThreads, 0, cuda_stream>>>(x, n, partials);
  });
}

}  // namespace ms::kernels
