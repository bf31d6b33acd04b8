// Elementwise fp32 operators on the CPU. These are the reference "twins" of the CUDA kernels in
// kernels/elementwise.cuh: same names, same argument order, and bitwise the same results (one
// rounding per operation, no fused multiply-add), so a GPU run can be checked element for
// element against them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ms::ops {

// out[i] = a[i] + b[i] for i < n. a, b, out: (n). out may be a or b; any other overlap is a
// programming error.
void add(const float* a, const float* b, float* out, size_t n);

// out[i] = alpha * x[i] for i < n. x, out: (n). out may be x.
void scale(const float* x, float alpha, float* out, size_t n);

// y[i] += alpha * x[i] for i < n, rounded twice (product, then sum). x, y: (n), not overlapping.
void axpy(float alpha, const float* x, float* y, size_t n);

// Memory moves on the device's buffers, so code above the backend seam never touches them with
// host loops. fill: x[i] = value. copy: dst[i] = src[i]; the ranges may overlap.
void fill(float* x, size_t n, float value);
void copy(const float* src, float* dst, size_t n);

// Rows of width floats. gather_rows: dst row i = src row rows[i]; scatter_rows: dst row rows[i]
// = src row i (rows distinct). i < count.
void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width, float* dst);
void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                  float* dst);

// x: (rows, cols); x[i, j] += column[j].
void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols);

}  // namespace ms::ops
