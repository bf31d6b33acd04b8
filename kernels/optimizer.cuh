// Optimizer updates on the GPU, twins of lib/ops/optimizer.h, and the f64 sum of squares of
// lib/ops/reduce.h that the global gradient norm uses: same names and argument order on device
// pointers, plus the stream to enqueue on. Plain C++ declarations, so CPU-only code can include
// them; the coefficients are host values passed by reference.
//
// The element updates repeat the CPU's fp32 arithmetic operation by operation, each rounded on
// its own (__fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn, so no FMA), and give its exact bits: a run
// resumed on the other device continues on the same values. The sums of squares accumulate in
// double like the CPU, in a fixed two-pass tree (grid size fixed by n, no atomics), so they are
// the same bits on every run and agree with the CPU's left-to-right sum to double rounding
// (each term is exact in double; only the order of the additions differs).
//
// Call these qualified (kernels::adamw_update): ops::AdamCoefficients brings the ops:: twins of
// the same names and parameters in by argument-dependent lookup.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"
#include "ops/optimizer.h"

namespace ms::kernels {

// One AdamW step of n elements (ops::adamw_update): w, m, v updated in place from g.
// w, g, m, v: device (n), disjoint.
Status adamw_update(const ops::AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                    float* m, float* v, int64_t n, Stream stream = nullptr);

// LAMB's first pass (ops::lamb_direction): updates m, v and writes the direction d; norms:
// device (2) doubles, overwritten with sum w^2 and sum d^2 over the n elements (0 for n = 0).
// w, g, m, v, d: device (n), disjoint.
Status lamb_direction(const ops::AdamCoefficients& c, bool weight_decay, const float* w,
                      const float* g, float* m, float* v, float* d, double* norms, int64_t n,
                      Stream stream = nullptr);

// LAMB's second pass (ops::lamb_update): w[i] -= step * d[i]. d, w: device (n), disjoint.
Status lamb_update(float step, const float* d, float* w, int64_t n, Stream stream = nullptr);

// *out = sum over i < n of double(x[i])^2 (ops::sum_of_squares_f64); 0 for n = 0.
// x: device (n); out: device scalar.
Status sum_of_squares_f64(const float* x, int64_t n, double* out, Stream stream = nullptr);

}  // namespace ms::kernels
