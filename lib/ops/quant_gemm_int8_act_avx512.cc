// The AVX-512 integer kernels (AVX512BW and AVX512-VNNI: Intel from Ice Lake, AMD from Zen 4).
// vpdpbusd multiplies 64 unsigned bytes by 64 signed ones and adds each four neighbouring
// products into one of 16 int32 lanes: the work of AVX2's vpmaddubsw, vpmaddwd and add in one
// instruction twice as wide, and exact (no int16 step to saturate). A lane's integer sum is
// converted and multiplied into the f32 total once per activation scale.
//   int4: a step takes two chunks (128 columns, one 64-byte line of packed nibbles). Their low
//     and high nibbles are rearranged so that each chunk's 32 low nibbles meet its 32 even-column
//     codes and its high ones the odd codes (Int8Activations' int4 layout), a vpdpbusd each.
//     Lane i < 8 of a chunk covers its even columns 8i .. 8i + 6, lane 8 + i the odd ones, so
//     with groups of 32 lanes 0-3 and 8-11 take the first group's scale and the rest the
//     second's. The nibbles are code + 8; as in the AVX2 kernel, an output subtracts the 8
//     times the codes' sum this adds once, at the end: sum_g w_scale[g] * group_bias[g]
//     (Int8ActView::group_bias), a vector multiply-add per 16 groups.
//   int8: the weights are signed, so the unsigned operand is |w| (vpabsb; a code of -128 from a
//     file becomes 128) and the signed one x, negated where w < 0 (no vpsignb in AVX-512). The
//     row's scale multiplies the total.
// Each output's sums run in the same order whatever the number of rows of x beside it, so a row
// of x gives the same bits alone (a decode step) as in a batch (a prefill). This file calls no
// inline function of another header (quant_gemm_int8_act.h says why).
#include <immintrin.h>

#include "ops/quant_gemm_int8_act.h"

namespace ms::ops {
namespace {

constexpr int64_t kChunk = 64;
// As in the AVX2 kernel: how far ahead of the step it multiplies the kernel asks for W's bytes.
constexpr int64_t kPrefetchBytes = 1024;

void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

__m512i load(const void* p) { return _mm512_loadu_si512(p); }

// The weight bytes two chunks' codes meet: [low nibbles, high nibbles] of the first chunk's 32
// packed bytes, then of the second's.
struct Int4Pair {
  __m512i first, second;
  explicit Int4Pair(const uint8_t* p) {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    const __m512i b = load(p);
    const __m512i lo = _mm512_and_si512(b, low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
    first = _mm512_shuffle_i64x2(lo, hi, 0x44);   // lo's 128-bit lanes 0, 1, then hi's 0, 1
    second = _mm512_shuffle_i64x2(lo, hi, 0xee);  // lanes 2, 3 of each
  }
};

// The same for one chunk alone (the last of a row whose width is an odd number of chunks).
__m512i int4_chunk(const uint8_t* p) {
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i lo = _mm256_and_si256(b, low4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

// sum + the products of the unsigned bytes w and the signed codes at x, four to a lane.
__m512i dot(__m512i sum, __m512i w, const int8_t* x) {
  return _mm512_dpbusd_epi32(sum, w, load(x));
}

// One row of W (int4 in groups of G) against T rows of x. A step takes 128 columns; with G = 32
// or 64 its first chunk goes to `a` and its second to `b`, with G = 128 (one activation scale
// per 128 columns) the whole step goes to `a`.
template <int G, int T>
struct Int4Row {
  static constexpr int64_t kCols = 2 * kChunk;
  const uint8_t* w;     // the row's packed bytes
  const float* scales;  // the row's group scales
  int64_t groups;
  XRows<T> x;

  void prefetch_step(int64_t s) const { prefetch(w + s * kChunk + kPrefetchBytes); }

  // The weight scales of chunk c, lane by lane.
  __m512 chunk_scales(int64_t c) const {
    if constexpr (G == 32) {
      return _mm512_mask_blend_ps(0xf0f0, _mm512_set1_ps(scales[2 * c]),
                                  _mm512_set1_ps(scales[2 * c + 1]));
    } else {
      return _mm512_set1_ps(scales[c]);
    }
  }

  // acc + the products of chunk c's weights `wc` and x codes, scaled.
  __m512 add_chunk(int t, int64_t c, __m512i wc, __m512 ws, __m512 acc) const {
    const __m512i sum = dot(_mm512_setzero_si512(), wc, x.codes[t] + c * kChunk);
    const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(x.scales[t][c]));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc);
  }

  void step(int64_t s, __m512 (&a)[T], __m512 (&b)[T]) const {
    const Int4Pair pair(w + s * kChunk);
    if constexpr (G == 128) {
      const __m512 ws = _mm512_set1_ps(scales[s]);
      for (int t = 0; t < T; ++t) {
        const int8_t* xc = x.codes[t] + s * kCols;
        const __m512i sum = dot(dot(_mm512_setzero_si512(), pair.first, xc), pair.second,
                                xc + kChunk);
        const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(x.scales[t][s]));
        a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, a[t]);
      }
    } else {
      const __m512 ws0 = chunk_scales(2 * s), ws1 = chunk_scales(2 * s + 1);
      for (int t = 0; t < T; ++t) {
        a[t] = add_chunk(t, 2 * s, pair.first, ws0, a[t]);
        b[t] = add_chunk(t, 2 * s + 1, pair.second, ws1, b[t]);
      }
    }
  }

  // The chunk left over after the steps (G = 32 or 64 only: with G = 128 a row is whole
  // steps), then the nibble biases: sum_g w_scale[g] * group_bias[g], 16 groups a time.
  void finish(int64_t cols, __m512 (&a)[T]) const {
    if (cols % kCols != 0) {
      const int64_t c = cols / kChunk - 1;
      const __m512i wc = int4_chunk(w + c * (kChunk / 2));
      const __m512 ws = chunk_scales(c);
      for (int t = 0; t < T; ++t) a[t] = add_chunk(t, c, wc, ws, a[t]);
    }
    for (int64_t g = 0; g < groups; g += 16) {
      const __mmask16 m =
          groups - g >= 16 ? 0xffff : static_cast<__mmask16>((1u << (groups - g)) - 1);
      const __m512 ws = _mm512_maskz_loadu_ps(m, scales + g);
      for (int t = 0; t < T; ++t) {
        a[t] = _mm512_fnmadd_ps(ws, _mm512_maskz_loadu_ps(m, x.group_bias[t] + g), a[t]);
      }
    }
  }
};

// One row of W (int8) against T rows of x, a chunk a step, into `a`.
template <int T>
struct Int8Row {
  static constexpr int64_t kCols = kChunk;
  const int8_t* w;  // the row's codes
  XRows<T> x;

  void prefetch_step(int64_t c) const { prefetch(w + c * kChunk + kPrefetchBytes); }

  void step(int64_t c, __m512 (&a)[T], __m512 (&)[T]) const {
    const __m512i wc = load(w + c * kChunk);
    const __m512i magnitude = _mm512_abs_epi8(wc);
    const __mmask64 negative = _mm512_movepi8_mask(wc);
    for (int t = 0; t < T; ++t) {
      const __m512i xc = load(x.codes[t] + c * kChunk);
      const __m512i signed_x = _mm512_mask_sub_epi8(xc, negative, _mm512_setzero_si512(), xc);
      const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), magnitude, signed_x);
      a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(x.scales[t][c]), a[t]);
    }
  }

  void finish(int64_t, __m512 (&)[T]) const {}
};

// Runs a row kernel over a row of `cols` columns, Row::kCols a step, alternating two sets of
// accumulators, and writes the T outputs, times `row_scale`, to y[t * ld].
template <int T, class Row>
void run_row(const Row& row, int64_t cols, float row_scale, float* y, int64_t ld) {
  const int64_t steps = cols / Row::kCols;
  __m512 a[T], b[T];
  for (int t = 0; t < T; ++t) a[t] = b[t] = _mm512_setzero_ps();
  int64_t s = 0;
  // Four steps per pass, as in the AVX2 kernel: the loop's own instructions halve.
  for (; s + 4 <= steps; s += 4) {
    for (int k = 0; k < 4; ++k) row.prefetch_step(s + k);
    row.step(s, a, b);
    row.step(s + 1, b, a);
    row.step(s + 2, a, b);
    row.step(s + 3, b, a);
  }
  for (; s + 2 <= steps; s += 2) {
    row.prefetch_step(s);
    row.prefetch_step(s + 1);
    row.step(s, a, b);
    row.step(s + 1, b, a);
  }
  if (s < steps) row.step(s, a, b);
  row.finish(cols, a);
  for (int t = 0; t < T; ++t) {
    y[t * ld] = _mm512_reduce_add_ps(_mm512_add_ps(a[t], b[t])) * row_scale;
  }
}

// Output channels r0 .. r1 - 1 of rows t0 .. t0 + T - 1 of x.
template <int T>
void dot_rows(const Int8ActView& x, const QuantView& w, int64_t t0, int64_t r0, int64_t r1,
              float* y) {
  const int64_t cols = w.cols;
  if (w.format == WeightFormat::kInt8) {
    const XRows<T> rows(x, t0, 0);
    for (int64_t r = r0; r < r1; ++r) {
      const Int8Row<T> row{reinterpret_cast<const int8_t*>(w.values) + r * cols, rows};
      run_row<T>(row, cols, w.scales[r], y + t0 * w.rows + r, w.rows);
    }
    return;
  }
  const int64_t groups = cols / w.group_size;
  const XRows<T> rows(x, t0, groups);
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* bytes = w.values + r * (cols / 2);
    const float* scales = w.scales + r * groups;
    float* out = y + t0 * w.rows + r;
    switch (w.group_size) {
      case 32:
        run_row<T>(Int4Row<32, T>{bytes, scales, groups, rows}, cols, 1.0f, out, w.rows);
        break;
      case 64:
        run_row<T>(Int4Row<64, T>{bytes, scales, groups, rows}, cols, 1.0f, out, w.rows);
        break;
      default:
        run_row<T>(Int4Row<128, T>{bytes, scales, groups, rows}, cols, 1.0f, out, w.rows);
        break;
    }
  }
}

}  // namespace

void int8_act_rows_avx512(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                          int64_t row_end) {
  for_each_int8_act_tile(x.n, row_begin, row_end, [&]<int T>(int64_t t, int64_t r0, int64_t r1) {
    dot_rows<T>(x, w, t, r0, r1, y);
  });
}

}  // namespace ms::ops
