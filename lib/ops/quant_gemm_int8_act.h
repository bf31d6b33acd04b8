// Private to the quant_gemm*.cc files: the integer kernels of the quantized linear, for int8 or
// int4 weights times int8 activations (ops/quant_act.h). The scalar twin is the reference; the
// AVX2 file is compiled with -mavx2 -mfma and also serves AVX-512 CPUs without VNNI (all of
// which have AVX2); the AVX-512 file (-mavx512bw -mavx512vnni) serves those with it.
#pragma once

#include <cstdint>

#include "ops/quant.h"
#include "ops/quant_act.h"

namespace ms::ops {

// An Int8Activations as plain pointers: the vector kernel files call no inline function of
// another header (only the anonymous-namespace helpers below), so they emit no shared (COMDAT)
// code the linker could pick for the other files.
struct Int8ActView {
  int64_t n = 0, cols = 0;
  int64_t scale_cols = kActivationChunk;  // columns per scale (activation_scale_cols of w)
  const int8_t* codes = nullptr;
  const float* scales = nullptr;
  const int32_t* nibble_bias = nullptr;
  // int4, for the vector kernels: int4_group_bias for w's group size, (n, cols / group_size);
  // null for the scalar twin, which subtracts nibble_bias chunk by chunk.
  const float* group_bias = nullptr;
  // int4, for the AVX-512 kernel: the codes in its steps' layout (int4_step_layout), (n,
  // cols); null for the other kernels.
  const int8_t* step_codes = nullptr;
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

// For the vector kernels, and like quant_gemm_impl.h in an anonymous namespace: each kernel
// file, compiled for its own instruction set, keeps its own copy, which the linker cannot pick
// for another file's callers.
namespace {

// Rows of x that share one decoded step of W, and output channels a task walks through for one
// block of rows of x (as in quant_gemm_impl.h).
constexpr int kInt8ActTokenBlock = 4;
constexpr int64_t kInt8ActRowTile = 16;

// Where rows t0 .. t0 + T - 1 of x start (groups: w's int4 groups per row, else unused),
// worked out once per block of output channels: the step loops index from these, so no address
// needs more than an add and a scaled index.
template <int T>
struct XRows {
  const int8_t* codes[T];
  const float* scales[T];
  const float* group_bias[T];  // int4 only

  XRows(const Int8ActView& x, int64_t t0, int64_t groups) {
    for (int t = 0; t < T; ++t) {
      codes[t] = x.codes + (t0 + t) * x.cols;
      scales[t] = x.scales + (t0 + t) * (x.cols / x.scale_cols);
      group_bias[t] = x.group_bias == nullptr ? nullptr : x.group_bias + (t0 + t) * groups;
    }
  }
};

// Walks output channels [row_begin, row_end) in tiles of kInt8ActRowTile and, within each, the n
// rows of x in blocks of kInt8ActTokenBlock (then the 1 to 3 left), calling
// block.template operator()<T>(t0, r0, r1) for rows t0 .. t0 + T - 1 and channels r0 .. r1 - 1.
template <class Block>
void for_each_int8_act_tile(int64_t n, int64_t row_begin, int64_t row_end, const Block& block) {
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kInt8ActRowTile) {
    const int64_t r1 = r0 + kInt8ActRowTile < row_end ? r0 + kInt8ActRowTile : row_end;
    int64_t t = 0;
    for (; t + kInt8ActTokenBlock <= n; t += kInt8ActTokenBlock) {
      block.template operator()<kInt8ActTokenBlock>(t, r0, r1);
    }
    switch (n - t) {
      case 3: block.template operator()<3>(t, r0, r1); break;
      case 2: block.template operator()<2>(t, r0, r1); break;
      case 1: block.template operator()<1>(t, r0, r1); break;
      default: break;
    }
  }
}

}  // namespace
}  // namespace ms::ops
