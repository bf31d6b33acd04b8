// Private to the quant_gemm*.cc files: the one kernel template, instantiated once per code path
// in a file compiled with that path's instruction set (quant_gemm_scalar.cc, _avx2.cc,
// _avx512.cc). A path supplies a vector type V of W floats and the operations below.
//
// Everything here is in an anonymous namespace and uses no standard-library templates, so a
// file compiled for AVX-512 emits no shared (COMDAT) code the linker could pick for the others.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/quant.h"

namespace ms::ops {

// Output channels [row_begin, row_end) of y: (n, w.rows) for every row of x: (n, w.cols). For
// int4, x is in the path's layout (quant_gemm.cc, int4_x_layout), not in column order.
using QuantRowsFn = void (*)(const float* x, const QuantView& w, float* y, int64_t n,
                             int64_t row_begin, int64_t row_end);
void quant_rows_scalar(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                       int64_t row_end);
void quant_rows_avx2(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                     int64_t row_end);
void quant_rows_avx512(const float* x, const QuantView& w, float* y, int64_t n,
                       int64_t row_begin, int64_t row_end);

// For int4, x comes laid out (quant_gemm.cc, int4_x_layout) in the order the kernel's decode
// produces weights, so decoding needs no interleaving shuffle:
//   pair layout: blocks of 2 * W columns (W the path's vector width), each holding the block's
//     even columns and then its odd ones, as W packed bytes' low and high nibbles come out.
//     For the scalar twin (W = 1) that is column order.
//   oct layout (paths with kInt4Oct, when 8 * W divides the row): blocks of 8 * W columns,
//     sub-vector k holding columns k, k + 8, k + 16, ...: a 32-bit lane of 4 packed bytes holds
//     8 consecutive columns, and shifting the whole vector by 4 bits brings the next one down.

namespace {

// Rows of x that share one decoded block of W.
constexpr int kTokenBlock = 4;
// Output channels a task walks through for one block of x rows before moving to the next (their
// weights stay in cache while every block of x passes over them).
constexpr int64_t kRowTile = 16;
// Output channels decoded together for a single row of x (a decode step) whose row is longer
// than kGemvShortCols: each load of x (for the int4 oct decode, each block of x brought into
// L1) then feeds that many rows of W, since such an x no longer stays in the 32 KiB L1 data
// cache beside the streaming weights and would otherwise be read from L2 once per row of W,
// several times W's own bytes. A shorter x stays in L1, and there one row at a time is faster:
// W is then read as one sequential stream, which the hardware prefetcher follows across rows,
// instead of kGemvRows short streams per block of rows, each of which it has to pick up anew
// (measured with quant_gemm_bench, docs/infer.md).
constexpr int kGemvRows = 4;
constexpr int64_t kGemvShortCols = 4096;
// How far ahead of the columns it multiplies Dot::accumulate asks for W's bytes (f32, bf16 and
// int8 codes): the hardware prefetchers alone kept the f32 GEMV's stream short of the read bound
// (docs/bench/infer.md, "Quantized decode kernels against
// the read bound").
constexpr int64_t kGemvPrefetchBytes = 4096;

// Asks for the 64-byte lines of [p, p + bytes), at least the first.
inline void prefetch_lines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  int64_t at = 0;
  do {
    __builtin_prefetch(c + at);
    at += 64;
  } while (at < bytes);
}

// Path P: using V; static constexpr int W; V zero(); V load(const float*);
// V fmadd(V a, V b, V c) = a * b + c; V add(V, V); float sum(V);
// V bf16(const uint8_t*), i8(const uint8_t*): W weights decoded to f32 from their first byte;
// V i4_scale(float s): what i4 needs to give a group's weights times s;
// void i4(const uint8_t* bytes, V scale, V& even, V& odd): the W bytes at `bytes` hold 2W
// columns; even and odd get the weights (code * s, rounded once as in dequantize_weights) of
// the even and the odd ones.
// bool kInt4Oct: the path also has the oct decode: using Packed; Packed i4_load(const uint8_t*)
// (4W bytes, 8W columns); template <int k, int T> V i4_codes(const Packed&) (lane j gets nibble
// k of its 32-bit lane, column 8j + k, as code * kInt4OctUnit, exactly; T, the rows of x that
// share the decode, may choose the instructions but not the value); float kInt4OctUnit (a power
// of two); V i4_block_scales(const float* scales, int G) (lane j gets the scale of the group its
// columns fall in, scales being the block's first group's).
//
// Dot<P, T, R> computes T rows of x against R rows of W. Each of the T * R outputs has its own
// K accumulators, filled in the same order whatever T and R are, so a row's bits depend on
// neither how many rows of x come with it nor how many rows of W are decoded beside it. Four
// accumulators, not two: an FMA's result is ready several cycles after it issues, and a decode
// step on short rows (one row of x, one row of W) has no other independent work to hide that
// behind. The gain is within a shared VM's spread (docs/bench/infer.md, "Four accumulators").
template <class P, int T, int R>
struct Dot {
  using V = typename P::V;
  static constexpr int K = 4;
  using Acc = V[K][T][R];

  static void zero(Acc& acc) {
    for (int k = 0; k < K; ++k) {
      for (int t = 0; t < T; ++t) {
        for (int r = 0; r < R; ++r) acc[k][t][r] = P::zero();
      }
    }
  }
  static float total(const Acc& acc, int t, int r) {
    V v = acc[0][t][r];
    for (int k = 1; k < K; ++k) v = P::add(v, acc[k][t][r]);
    return P::sum(v);
  }

  // acc[k][t][r] += x[t, c] * w_r[c] over columns [0, body) (a multiple of W), vector j going
  // to accumulator j % K; decode.vec(r, c) gives W weights of row r from column c.
  template <class Decode>
  static void accumulate(const float* x, int64_t ld, int64_t body, const Decode& decode,
                         Acc& acc) {
    int64_t c = 0;
    for (; c + K * P::W <= body; c += K * P::W) {
      for (int r = 0; r < R; ++r) decode.prefetch(r, c, K * P::W);
      for (int k = 0; k < K; ++k) step(x, ld, c + k * P::W, decode, acc[k]);
    }
    for (int k = 0; c < body; c += P::W, ++k) step(x, ld, c, decode, acc[k]);
  }
  template <class Decode>
  static void step(const float* x, int64_t ld, int64_t c, const Decode& decode,
                   V (&acc)[T][R]) {
    V wv[R];
    for (int r = 0; r < R; ++r) wv[r] = decode.vec(r, c);
    for (int t = 0; t < T; ++t) {
      const V xv = P::load(x + t * ld + c);
      for (int r = 0; r < R; ++r) acc[t][r] = P::fmadd(xv, wv[r], acc[t][r]);
    }
  }

  // f32, bf16 and int8 codes: the W-wide body through accumulate, the rest one column at a
  // time. out[t][r] is the dot product of x row t with W row r (int8: before its scale).
  template <class Decode>
  static void run(const float* x, int64_t cols, const Decode& decode, float (&out)[T][R]) {
    Acc acc;
    zero(acc);
    const int64_t body = cols - cols % P::W;
    accumulate(x, cols, body, decode, acc);
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) {
        float s = total(acc, t, r);
        for (int64_t c = body; c < cols; ++c) s += x[t * cols + c] * decode.one(r, c);
        out[t][r] = s;
      }
    }
  }

  // int4, x in the pair layout: per group, the scale is folded into the decode, and the even
  // and odd columns of each block go to accumulators 0 and 1. The group size is a template
  // argument so the short loop over a group's blocks unrolls.
  static void run_int4(const float* x, const QuantView& w, int64_t r0, float (&out)[T][R]) {
    if constexpr (P::kInt4Oct) {
      if (w.cols % (8 * P::W) == 0) {
        switch (w.group_size) {
          case 32: return run_int4_oct<32>(x, w, r0, out);
          case 64: return run_int4_oct<64>(x, w, r0, out);
          default: return run_int4_oct<128>(x, w, r0, out);
        }
      }
    }
    switch (w.group_size) {
      case 32: return run_int4_groups<32>(x, w, r0, out);
      case 64: return run_int4_groups<64>(x, w, r0, out);
      default: return run_int4_groups<128>(x, w, r0, out);
    }
  }
  // The packed bytes and the scales of W rows r0 .. r0 + R - 1.
  static void int4_rows(const QuantView& w, int64_t r0, int64_t group, const uint8_t* (&rows)[R],
                        const float* (&scales)[R]) {
    for (int r = 0; r < R; ++r) {
      rows[r] = w.values + (r0 + r) * (w.cols / 2);
      scales[r] = w.scales + (r0 + r) * (w.cols / group);
    }
  }

  // int4, x in the oct layout: per block of 8W columns and row of W, the products of the codes
  // (unscaled) with x go to two block accumulators (sub-vectors k even and odd), which are then
  // scaled lane by lane, each lane by its group's scale, into the output's two sums. The codes
  // carry the path's kInt4OctUnit, a power of two divided out of each total at the end, so
  // every rounding in between is the one the unit-free sums would make (short of overflow or
  // subnormals). The rows of W take turns within a block: one row's decode is live at a time
  // (AVX2 has 16 vector registers), and the block of x, loaded for the first row, is in L1 for
  // the others.
  template <int G>
  static void run_int4_oct(const float* x, const QuantView& w, int64_t r0, float (&out)[T][R]) {
    constexpr int kBlock = 8 * P::W;
    const int64_t cols = w.cols;
    const uint8_t* rows[R];
    const float* scales[R];
    int4_rows(w, r0, G, rows, scales);
    V sums[2][T][R];
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) sums[0][t][r] = sums[1][t][r] = P::zero();
    }
    for (int64_t c = 0; c < cols; c += kBlock) {
      const float* xb[T];
      for (int t = 0; t < T; ++t) xb[t] = x + t * cols + c;
      for (int r = 0; r < R; ++r) {
        V block[2][T];
        oct_step<0>(xb, P::i4_load(rows[r] + c / 2), block);
        const V s = P::i4_block_scales(scales[r] + c / G, G);
        for (int t = 0; t < T; ++t) {
          sums[0][t][r] = P::fmadd(block[0][t], s, sums[0][t][r]);
          sums[1][t][r] = P::fmadd(block[1][t], s, sums[1][t][r]);
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) {
        out[t][r] = P::sum(P::add(sums[0][t][r], sums[1][t][r])) / P::kInt4OctUnit;
      }
    }
  }
  // Sub-vectors k .. 7 of one block of one row of W into block[k % 2], xb[t] being row t of x
  // at the block's first column. k is a template argument so that each step's nibble position
  // is a constant the path can build into its instructions.
  template <int k, class Packed>
  static void oct_step(const float* const (&xb)[T], const Packed& packed, V (&block)[2][T]) {
    const V codes = P::template i4_codes<k, T>(packed);
    for (int t = 0; t < T; ++t) {
      const V xv = P::load(xb[t] + k * P::W);
      block[k % 2][t] = k < 2 ? P::mul(xv, codes) : P::fmadd(xv, codes, block[k % 2][t]);
    }
    if constexpr (k < 7) oct_step<k + 1>(xb, packed, block);
  }

  template <int G>
  static void run_int4_groups(const float* x, const QuantView& w, int64_t r0,
                              float (&out)[T][R]) {
    const int64_t cols = w.cols;
    const uint8_t* rows[R];
    const float* scales[R];
    int4_rows(w, r0, G, rows, scales);
    Acc acc;
    zero(acc);
    for (int64_t g = 0; g < cols / G; ++g) {
      V scale[R];
      for (int r = 0; r < R; ++r) scale[r] = P::i4_scale(scales[r][g]);
      for (int b = 0; b < G; b += 2 * P::W) {
        const int64_t c = g * G + b;
        V even[R], odd[R];
        for (int r = 0; r < R; ++r) P::i4(rows[r] + c / 2, scale[r], even[r], odd[r]);
        for (int t = 0; t < T; ++t) {
          const V xe = P::load(x + t * cols + c);
          const V xo = P::load(x + t * cols + c + P::W);
          for (int r = 0; r < R; ++r) {
            acc[0][t][r] = P::fmadd(xe, even[r], acc[0][t][r]);
            acc[1][t][r] = P::fmadd(xo, odd[r], acc[1][t][r]);
          }
        }
      }
    }
    for (int t = 0; t < T; ++t) {
      for (int r = 0; r < R; ++r) out[t][r] = total(acc, t, r);
    }
  }
};

template <class P>
struct F32Decode {
  const float* w;  // row 0 of the R rows
  int64_t ld;
  typename P::V vec(int r, int64_t c) const { return P::load(w + r * ld + c); }
  float one(int r, int64_t c) const { return w[r * ld + c]; }
  // Columns [c, c + n) of row r, kGemvPrefetchBytes on.
  void prefetch(int r, int64_t c, int64_t n) const {
    prefetch_lines(reinterpret_cast<const char*>(w + r * ld + c) + kGemvPrefetchBytes,
                   n * static_cast<int64_t>(sizeof(float)));
  }
};
template <class P>
struct Bf16Decode {
  const uint8_t* w;
  int64_t ld;  // bytes per row
  typename P::V vec(int r, int64_t c) const { return P::bf16(w + r * ld + 2 * c); }
  void prefetch(int r, int64_t c, int64_t n) const {
    prefetch_lines(w + r * ld + 2 * c + kGemvPrefetchBytes, 2 * n);
  }
  float one(int r, int64_t c) const {
    uint32_t bits = 0;
    std::memcpy(&bits, w + r * ld + 2 * c, 2);
    bits <<= 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};
template <class P>
struct I8Decode {
  const uint8_t* w;
  int64_t ld;
  typename P::V vec(int r, int64_t c) const { return P::i8(w + r * ld + c); }
  void prefetch(int r, int64_t c, int64_t n) const {
    prefetch_lines(w + r * ld + c + kGemvPrefetchBytes, n);
  }
  float one(int r, int64_t c) const {
    return static_cast<float>(static_cast<int8_t>(w[r * ld + c]));
  }
};

// T rows of x against output channels [r0, r0 + R); writes y[t * w.rows + r].
template <class P, int T, int R>
void dot_rows(const float* x, const QuantView& w, int64_t r0, float* y) {
  float out[T][R] = {};
  const int64_t k = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      Dot<P, T, R>::run(x, k, F32Decode<P>{reinterpret_cast<const float*>(w.values) + r0 * k, k},
                        out);
      break;
    case WeightFormat::kBF16:
      Dot<P, T, R>::run(x, k, Bf16Decode<P>{w.values + 2 * r0 * k, 2 * k}, out);
      break;
    case WeightFormat::kInt8:
      Dot<P, T, R>::run(x, k, I8Decode<P>{w.values + r0 * k, k}, out);
      for (int t = 0; t < T; ++t) {
        for (int r = 0; r < R; ++r) out[t][r] *= w.scales[r0 + r];
      }
      break;
    case WeightFormat::kInt4:
      Dot<P, T, R>::run_int4(x, w, r0, out);
      break;
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) y[t * w.rows + r0 + r] = out[t][r];
  }
}

// Output channels [r0, r1) for T rows of x: a single long row of x takes kGemvRows channels
// at a time, anything else one channel at a time (several rows of x already share each
// decoded vector of W).
template <class P, int T>
void dot_tile(const float* x, const QuantView& w, float* y, int64_t r0, int64_t r1) {
  int64_t r = r0;
  if constexpr (T == 1) {
    if (w.cols > kGemvShortCols) {
      for (; r + kGemvRows <= r1; r += kGemvRows) dot_rows<P, 1, kGemvRows>(x, w, r, y);
    }
  }
  for (; r < r1; ++r) dot_rows<P, T, 1>(x, w, r, y);
}

template <class P>
void quant_rows(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                int64_t row_end) {
  for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
    const int64_t r1 = r0 + kRowTile < row_end ? r0 + kRowTile : row_end;
    int64_t t = 0;
    for (; t + kTokenBlock <= n; t += kTokenBlock) {
      dot_tile<P, kTokenBlock>(x + t * w.cols, w, y + t * w.rows, r0, r1);
    }
    const float* xt = x + t * w.cols;
    float* yt = y + t * w.rows;
    switch (n - t) {
      case 3: dot_tile<P, 3>(xt, w, yt, r0, r1); break;
      case 2: dot_tile<P, 2>(xt, w, yt, r0, r1); break;
      case 1: dot_tile<P, 1>(xt, w, yt, r0, r1); break;
      default: break;
    }
  }
}

}  // namespace
}  // namespace ms::ops
