// Reductions over fp32 and bf16 vectors on the GPU, accumulating in fp32: twins of
// lib/ops/reduce.h. The result is written to a device scalar so a caller can chain it (into a
// grad-norm or a collective) without a host round trip.
//
// Deterministic: the grid size depends only on n, each block reduces a fixed grid-stride slice
// with warp shuffles in a fixed tree, and a second one-block pass combines the per-block
// partials (no atomics), so the same input gives the same bits on every run. Sums agree with the
// CPU's pairwise sums to within fp32 rounding (the summation orders differ); max and absmax are
// exact. NaN propagates as on the CPU. Workspace for the partials comes from the stream-ordered
// allocator (cudaMallocAsync) and is released on the same stream.
#pragma once

#include <cstddef>

#include "core/half.h"
#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// Each reads x: device (n) and writes one float to `out` (device). n == 0 writes the identity:
// 0 for sum, sum_of_squares and absmax, -infinity for max. InvalidArgument for a null or
// misaligned x (n > 0) or out.
Status sum(const float* x, size_t n, float* out, Stream stream = nullptr);
Status sum(const bf16* x, size_t n, float* out, Stream stream = nullptr);
Status sum_of_squares(const float* x, size_t n, float* out, Stream stream = nullptr);
Status sum_of_squares(const bf16* x, size_t n, float* out, Stream stream = nullptr);
Status max(const float* x, size_t n, float* out, Stream stream = nullptr);
Status max(const bf16* x, size_t n, float* out, Stream stream = nullptr);
Status absmax(const float* x, size_t n, float* out, Stream stream = nullptr);
Status absmax(const bf16* x, size_t n, float* out, Stream stream = nullptr);

}  // namespace ms::kernels
