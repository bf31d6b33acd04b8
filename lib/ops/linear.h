// Linear layers in the Hugging Face convention: weights are (out_features, in_features) and
// y = x @ W^T. All rows of a micro-batch go through one OpenBLAS sgemm (threaded by OpenBLAS);
// the grouped form runs one sgemm per group of consecutive rows (MoE experts).
//
// A forward of at most kLinearGemvMaxRows rows (a decode step) is memory-bound: it goes through
// the f32 path of the quantized linear (ops/quant_gemm.h), a GEMV that streams W once, threaded
// over output rows on the ops pool and vectorised for the widest path the CPU runs. OpenBLAS
// 0.3.21's sgemm packs W for one row and streams it at a fraction of the read bandwidth
// (docs/bench/infer.md, "f32 decode through the GEMV"). Its results equal sgemm's within
// summation-order rounding, not bitwise.
#pragma once

#include <cstdint>

namespace ms::ops {

// The most rows of x a forward takes through the streaming GEMV rather than sgemm.
inline constexpr int64_t kLinearGemvMaxRows = 4;

// x: (n, in), w: (out, in) -> y: (n, out) = x @ w^T (overwritten).
void linear_forward(const float* x, const float* w, float* y, int64_t n, int64_t in, int64_t out);

// dy: (n, out). Accumulates dx: (n, in) += dy @ w (skipped when dx is null) and
// dw: (out, in) += dy^T @ x (skipped when dw is null). n may be 0.
void linear_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                     int64_t n, int64_t in, int64_t out);

// Rows [offsets[g], offsets[g+1]) of x: (rows, in) go through w[g]: (out, in) into the same
// rows of y: (rows, out); offsets has groups + 1 non-decreasing entries starting at 0.
void grouped_linear_forward(const float* x, const float* const* w, const int64_t* offsets,
                            int64_t groups, float* y, int64_t in, int64_t out);

// The backward of grouped_linear_forward: accumulates dx (may be null) and each dw[g].
void grouped_linear_backward(const float* x, const float* const* w, const int64_t* offsets,
                             int64_t groups, const float* dy, float* dx, float* const* dw,
                             int64_t in, int64_t out);

}  // namespace ms::ops
