// Private to the quant_gemm*.cc files: the integer kernels of the quantized linear, for int8 or
// int4 weights times int8 activations (ops/quant_act.h). The scalar twin is the reference; the
// AVX2 file is compiled with -mavx2 -mfma and also serves AVX-512 CPUs without VNNI (all of
// which have AVX2); the AVX-512 file (-mavx512bw -mavx512vnni) serves those with it.
#pragma once

#include <cstdint>

#include "ops/quant.h"
#include "ops/quant_act.h"

namespace ms::ops {

// An Int8Activations as plain pointers: the AVX2 file calls no inline function of another
// header, so it emits no shared (COMDAT) code the linker could pick for the other files.
struct Int8ActView {
  int64_t n = 0, cols = 0;
  int64_t scale_cols = kActivationChunk;  // columns per scale (activation_scale_cols of w)
  const int8_t* codes = nullptr;
  const float* scales = nullptr;
  const int32_t* nibble_bias = nullptr;
  // int4, for the vector kernels: int4_group_bias for w's group size, (n, cols / group_size);
  // null for the scalar twin, which subtracts nibble_bias chunk by chunk.
  const float* group_bias = nullptr;
};

// Output channels [row_begin, row_end) of y: (x.n, w.rows) for every row of x, which was
// quantized for w's format; int8_activations_apply(w) holds.
using Int8ActRowsFn = void (*)(const Int8ActView& x, const QuantView& w, float* y,
                               int64_t row_begin, int64_t row_end);
void int8_act_rows_scalar(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                          int64_t row_end);
void int8_act_rows_avx2(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                        int64_t row_end);
void int8_act_rows_avx512(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                          int64_t row_end);

}  // namespace ms::ops
