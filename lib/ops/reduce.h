// Reductions over fp32 and bf16 vectors on the CPU, accumulating in fp32: the twins of the CUDA
// reductions in kernels/reduce.cuh. The training gradient norm is sum_of_squares_f64 (below).
//
// Sums use pairwise (cascade) summation rather than Kahan compensation: its error bound grows
// with log2(n) instead of n, it costs no extra flops and vectorizes, it has the same tree shape
// as the GPU block reduction (so the two agree closely), and unlike Kahan it cannot be undone by
// a compiler that reassociates. Results depend only on n and the values, never on threads.
//
// max and absmax are exact. A NaN anywhere makes every result NaN, so an overflowed gradient is
// never hidden by the reduction that is meant to detect it.
#pragma once

#include <cstddef>

#include "core/half.h"

namespace ms::ops {

// Each reads x: (n). For n == 0: sum and sum_of_squares are 0, absmax is 0, max is -infinity.
float sum(const float* x, size_t n);
float sum(const bf16* x, size_t n);
// Sum of x[i]^2 (the squared L2 norm), for gradient-norm clipping.
float sum_of_squares(const float* x, size_t n);
float sum_of_squares(const bf16* x, size_t n);
float max(const float* x, size_t n);
float max(const bf16* x, size_t n);
// max |x[i]|.
float absmax(const float* x, size_t n);
float absmax(const bf16* x, size_t n);

// Sum of x[i]^2 accumulated in double, left to right (not pairwise): the gradient norm that
// training clips by (train/grad_clip.h). Each square is exact in double, so the order only
// moves the last bits of the result; it is kept because a bitwise resume and the golden runs
// pin those bits. The one reduction here that does not follow the pairwise rule above.
double sum_of_squares_f64(const float* x, size_t n);

// Blocks of this many elements are summed left to right; the blocks are then combined pairwise.
inline constexpr size_t kPairwiseBlock = 64;

}  // namespace ms::ops
