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

// Output channels [row_begin, row_end) of y: (n, w.rows) for every row of x: (n, w.cols).
using QuantRowsFn = void (*)(const float* x, const QuantView& w, float* y, int64_t n,
                             int64_t row_begin, int64_t row_end);
void quant_rows_scalar(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                       int64_t row_end);
void quant_rows_avx2(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                     int64_t row_end);
void quant_rows_avx512(const float* x, const QuantView& w, float* y, int64_t n,
                       int64_t row_begin, int64_t row_end);

namespace {

// Rows of x that share one decoded block of W.
constexpr int kTokenBlock = 4;
// Output channels a task walks through for one block of x rows before moving to the next (their
// weights stay in cache while every block of x passes over them).
constexpr int64_t kRowTile = 16;

// Path P: using V; static constexpr int W; V zero(); V load(const float*);
// V fmadd(V a, V b, V c) = a * b + c; V add(V, V); V splat(float); float sum(V);
// V bf16(const uint8_t*), i8(const uint8_t*): W weights decoded to f32 from their first byte;
// V i4(const uint8_t* row, int64_t c): the int4 codes of columns [c, c + W) of a packed row
// (c a multiple of W), without their scale.
template <class P, int T>
struct Dot {
  using V = typename P::V;
  // Independent accumulators per row of x, so FMA latency does not bound one chain; the same
  // for every T, so a row's bits do not depend on how many rows come with it.
  static constexpr int K = 2;

  // acc[k][t] += x[t, c] * w[c] over columns [begin, end) (a multiple of W apart), vector j
  // going to accumulator j % K.
  template <class Decode>
  static void accumulate(const float* x, int64_t ld, int64_t begin, int64_t end, Decode decode,
                         V (&acc)[K][T]) {
    int64_t c = begin;
    for (; c + K * P::W <= end; c += K * P::W) {
      for (int k = 0; k < K; ++k) {
        const V wv = decode.vec(c + k * P::W);
        for (int t = 0; t < T; ++t) {
          acc[k][t] = P::fmadd(P::load(x + t * ld + c + k * P::W), wv, acc[k][t]);
        }
      }
    }
    for (int k = 0; c < end; c += P::W, ++k) {
      const V wv = decode.vec(c);
      for (int t = 0; t < T; ++t) acc[k][t] = P::fmadd(P::load(x + t * ld + c), wv, acc[k][t]);
    }
  }

  static void zero(V (&acc)[K][T]) {
    for (int k = 0; k < K; ++k) {
      for (int t = 0; t < T; ++t) acc[k][t] = P::zero();
    }
  }
  // The K accumulators of row t added into one vector, in a fixed order.
  static V combine(const V (&acc)[K][T], int t) {
    V v = acc[0][t];
    for (int k = 1; k < K; ++k) v = P::add(v, acc[k][t]);
    return v;
  }

  // Dot products of T rows of x (stride ld) with one row of W of `cols` columns: the W-wide
  // body through accumulate, the rest one column at a time. decode gives the row's weights.
  template <class Decode>
  static void run(const float* x, int64_t ld, int64_t cols, Decode decode, float* out) {
    V acc[K][T];
    zero(acc);
    const int64_t body = cols - cols % P::W;
    accumulate(x, ld, 0, body, decode, acc);
    for (int t = 0; t < T; ++t) {
      float s = P::sum(combine(acc, t));
      for (int64_t c = body; c < cols; ++c) s += x[t * ld + c] * decode.one(c);
      out[t] = s;
    }
  }

  // int4: each group's partial sums are scaled once and added to the row's sums.
  template <class Decode>
  static void run_int4(const float* x, int64_t ld, const QuantView& w, Decode decode,
                       const float* scales, float* out) {
    V acc[T];
    for (int t = 0; t < T; ++t) acc[t] = P::zero();
    for (int64_t g = 0; g < w.cols / w.group_size; ++g) {
      V part[K][T];
      zero(part);
      accumulate(x, ld, g * w.group_size, (g + 1) * w.group_size, decode, part);
      const V s = P::splat(scales[g]);
      for (int t = 0; t < T; ++t) acc[t] = P::fmadd(combine(part, t), s, acc[t]);
    }
    for (int t = 0; t < T; ++t) out[t] = P::sum(acc[t]);
  }
};

template <class P>
struct F32Decode {
  const float* row;
  typename P::V vec(int64_t c) const { return P::load(row + c); }
  float one(int64_t c) const { return row[c]; }
};
template <class P>
struct Bf16Decode {
  const uint8_t* row;
  typename P::V vec(int64_t c) const { return P::bf16(row + 2 * c); }
  float one(int64_t c) const {
    uint32_t bits = 0;
    std::memcpy(&bits, row + 2 * c, 2);
    bits <<= 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};
template <class P>
struct I4Decode {
  const uint8_t* row;
  typename P::V vec(int64_t c) const { return P::i4(row, c); }
};
template <class P>
struct I8Decode {
  const uint8_t* row;
  typename P::V vec(int64_t c) const { return P::i8(row + c); }
  float one(int64_t c) const { return static_cast<float>(static_cast<int8_t>(row[c])); }
};

// T rows of x against output channel r; writes y[t * w.rows + r].
template <class P, int T>
void dot_rows(const float* x, const QuantView& w, int64_t r, float* y) {
  float out[T] = {};
  const int64_t k = w.cols;
  switch (w.format) {
    case WeightFormat::kF32:
      Dot<P, T>::run(x, k, k, F32Decode<P>{reinterpret_cast<const float*>(w.values) + r * k}, out);
      break;
    case WeightFormat::kBF16:
      Dot<P, T>::run(x, k, k, Bf16Decode<P>{w.values + 2 * r * k}, out);
      break;
    case WeightFormat::kInt8:
      Dot<P, T>::run(x, k, k, I8Decode<P>{w.values + r * k}, out);
      for (int t = 0; t < T; ++t) out[t] *= w.scales[r];
      break;
    case WeightFormat::kInt4: {
      const int64_t groups = k / w.group_size;
      Dot<P, T>::run_int4(x, k, w, I4Decode<P>{w.values + r * (k / 2)}, w.scales + r * groups,
                          out);
      break;
    }
  }
  for (int t = 0; t < T; ++t) y[t * w.rows + r] = out[t];
}

template <class P, int T>
void dot_tile(const float* x, const QuantView& w, float* y, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) dot_rows<P, T>(x, w, r, y);
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
