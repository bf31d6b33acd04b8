// Memory ops on the GPU, twins of the fill/copy/row/column ops of lib/ops/elementwise.h that
// ops::Backend exposes: same names and argument order on device pointers (the row indices too),
// plus the stream to enqueue on. Plain C++ declarations, so CPU-only code can include them.
//
// Every op moves or adds fp32 values one element per thread, so results equal the CPU twin bit
// for bit (NaN payloads aside) and are the same on every run. Each entry point checks its
// arguments (negative sizes, null or misaligned pointers with work to do) and returns
// InvalidArgument before any CUDA call; zero work launches nothing.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// x[i] = value for i < n. x: device (n).
Status fill(float* x, int64_t n, float value, Stream stream = nullptr);

// dst[i] = src[i] for i < n with memmove semantics: the ranges may overlap (then the copy goes
// through a temporary buffer from the stream-ordered allocator, since cudaMemcpyAsync leaves
// overlapping copies undefined). src, dst: device (n).
Status copy(const float* src, float* dst, int64_t n, Stream stream = nullptr);

// dst[i, :] = src[rows[i], :] for i < count, rows of `width` floats. src: device, with every
// rows[i] a valid row; rows: device (count) int64; dst: device (count, width), disjoint from src.
Status gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                   float* dst, Stream stream = nullptr);

// dst[rows[i], :] = src[i, :] for i < count (overwritten, not added). The rows must be
// distinct: the CPU twin lets the last duplicate win, here duplicates would race. src: device
// (count, width); rows: device (count) int64; dst: device, disjoint from src.
Status scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                    float* dst, Stream stream = nullptr);

// x[i, j] += column[j] for i < rows, j < cols. x: device (rows, cols); column: device (cols),
// disjoint from x.
Status add_to_columns(float* x, const float* column, int64_t rows, int64_t cols,
                      Stream stream = nullptr);

}  // namespace ms::kernels
