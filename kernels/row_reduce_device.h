// Device code for the row kernels of kernels/nn.cu and kernels/embedding_loss.cu (include only
// from .cu files): warp and block folds of one value per thread with a fixed order, so a row
// sum is the same bits on every run, and every thread gets the result.
#pragma once

#include <cuda_runtime.h>

#include "kernels/launch.h"

namespace ms::kernels::row_reduce {

inline constexpr unsigned kWarpSize = 32;
inline constexpr unsigned kWarpsPerBlock = kBlockThreads / kWarpSize;

struct Sum {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
// The larger of a and b, ignoring a NaN b (as std::max(a, b) does on the CPU). Commutative for
// the non-NaN values the row kernels fold, which the butterfly below needs.
struct Max {
  __device__ float operator()(float a, float b) const { return a < b ? b : a; }
};

// Butterfly over the warp: at each step lane i folds its value with lane i ^ offset's. The fold
// is commutative, so both lanes of a pair compute the same value and after five steps every
// lane holds the same result, taken in the same tree on every run.
template <typename T, typename Fold>
__device__ T warp_fold(T v, Fold fold) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = fold(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  return v;
}

// Folds one value per thread of a kBlockThreads block; every thread returns the result. Each
// warp folds its values, then every thread folds the warp results in warp order. Must be
// reached by all threads of the block (it synchronizes twice, the second time so the next call
// may reuse the shared slots).
template <typename T, typename Fold>
__device__ T block_fold(T v, Fold fold) {
  __shared__ T warp_results[kWarpsPerBlock];
  v = warp_fold(v, fold);
  if (threadIdx.x % kWarpSize == 0) warp_results[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  T result = warp_results[0];
  for (unsigned w = 1; w < kWarpsPerBlock; ++w) result = fold(result, warp_results[w]);
  __syncthreads();
  return result;
}

}  // namespace ms::kernels::row_reduce
