// Elementwise fp32 operators on the CPU. These are the reference "twins" of the CUDA kernels in
// kernels/elementwise.cuh: same names, same argument order, and bitwise the same results (one
// rounding per operation, no fused multiply-add), so a GPU run can be checked element for
// element against them.
#pragma once

#include <cstddef>

namespace ms::ops {

// out[i] = a[i] + b[i] for i < n. a, b, out: (n). out may be a or b; any other overlap is a
// programming error.
void add(const float* a, const float* b, float* out, size_t n);

// out[i] = alpha * x[i] for i < n. x, out: (n). out may be x.
void scale(const float* x, float alpha, float* out, size_t n);

// y[i] += alpha * x[i] for i < n, rounded twice (product, then sum). x, y: (n), not overlapping.
void axpy(float alpha, const float* x, float* y, size_t n);

}  // namespace ms::ops
