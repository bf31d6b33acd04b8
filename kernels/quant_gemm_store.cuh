// Private to the quant_gemm*.cu kernels: the end of a chunked quantized-linear block, which
// sums each thread's partial sums for the block's kRows output channels and kTokens rows of x
// and writes them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/quant.h"

namespace ms::kernels {

// Sums acc across each warp by shuffles, then across warps in shared memory, and writes
// y[(t0 + t) * w.rows + r0 + i] for the rows and tokens in range, times the int8 row scale
// when `int8_row_scale`. Every thread of the block must call it.
template <int kThreads, int kRows, int kTokens>
__device__ __forceinline__ void store_block_sums(const float (&acc)[kRows][kTokens],
                                                 const ops::QuantView& w, int64_t r0,
                                                 int64_t t0, int64_t n, bool int8_row_scale,
                                                 float* __restrict__ y) {
  constexpr unsigned kWarpSize = 32;
  constexpr int kWarps = kThreads / static_cast<int>(kWarpSize);
  __shared__ float partial[kWarps][kRows][kTokens];
  const unsigned lane = threadIdx.x % kWarpSize;
  const unsigned warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int i = 0; i < kRows; ++i) {
#pragma unroll
    for (int t = 0; t < kTokens; ++t) {
      float v = acc[i][t];
      for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
      }
      if (lane == 0) partial[warp][i][t] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x >= kRows * kTokens) return;
  const int i = static_cast<int>(threadIdx.x) / kTokens;
  const int t = static_cast<int>(threadIdx.x) % kTokens;
  if (r0 + i >= w.rows || t0 + t >= n) return;
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < kWarps; ++k) sum += partial[k][i][t];
  if (int8_row_scale) sum *= __ldg(w.scales + r0 + i);
  y[(t0 + t) * w.rows + r0 + i] = sum;
}

}  // namespace ms::kernels
