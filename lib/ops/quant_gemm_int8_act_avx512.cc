// The AVX-512 integer kernels (AVX512BW and AVX512-VNNI: Intel from Ice Lake, AMD from Zen 4).
// vpdpbusd multiplies 64 unsigned bytes by 64 signed ones and adds each four neighbouring
// products into one of 16 int32 lanes: the work of AVX2's vpmaddubsw, vpmaddwd and add in one
// instruction twice as wide, and exact (no int16 step to saturate). A lane's integer sum is
// converted and multiplied into the f32 total once per activation scale.
//   int4: a step takes two chunks (128 columns, one 64-byte line of packed nibbles). Chunk k's
//     byte b holds its columns 2b (low nibble) and 2b + 1 (high), so the line's 64 low nibbles
//     are the two chunks' even columns and its high ones their odd columns. x comes laid out to
//     match (int4_step_layout, once per call), so one vpdpbusd per nibble half adds both chunks
//     into one vector, lane i < 8 summing chunk 0's columns 8i .. 8i + 7 and lane 8 + i chunk
//     1's, and one conversion and one multiply-add per step scale it lane by lane (the weight
//     groups' scales times x's, formed in a 128-bit register and spread by one permute). The
//     line is read once. Shuffling the nibbles to meet x's per-chunk layout instead, with a
//     conversion and scaling per chunk, took 13 vector instructions per line to this loop's 9
//     and ran 26-45% slower from the cache (docs/bench/infer.md, "Quantized decode kernels
//     against the read bound").
//     The nibbles are code + 8; an output subtracts the 8 times the codes' sum this adds once,
//     at the end: sum_g w_scale[g] * group_bias[g] (Int8ActView::group_bias), a vector
//     multiply-add per 16 groups.
//   int8: the weights are signed, so the unsigned operand is |w| (vpabsb; a code of -128 from a
//     file becomes 128) and the signed one x, negated where w < 0 (no vpsignb in AVX-512). The
//     row's scale multiplies the total.
// Each output's sums run in the same order whatever the number of rows of x beside it, so a row
// of x gives the same bits alone (a decode step) as in a batch (a prefill). This file calls no
// inline function of another header (quant_gemm_int8_act.h says why).
#include <cassert>
#include <immintrin.h>

#include "ops/quant_gemm_int8_act.h"

namespace ms::ops {
namespace {

constexpr int64_t kChunk = 64;
// How far ahead of the step it multiplies the kernel asks for W's bytes (and the AVX2 kernel
// 1 KiB): with 1 KiB the two cores streamed W at 34 GB/s where a plain read of the same
// matrices took 54; 4 KiB, with the scales' stream prefetched too, gave 39 (docs/bench/infer.md,
// "Quantized decode kernels against the read bound").
constexpr int64_t kPrefetchBytes = 4096;

void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// The first kPrefetchBytes of a block of rows (at most `bytes`), asked for before its first
// step: the steps ask only for what lies kPrefetchBytes ahead of them, and a decode step's
// blocks can be as small as 16 KiB.
void prefetch_start(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t at = 0; at < bytes && at < kPrefetchBytes; at += kChunk) prefetch(c + at);
}

__m512i load(const void* p) { return _mm512_loadu_si512(p); }

// Two floats in the low half of a register.
__m128 two(const float* p) {
  return _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p)));
}

// The one chunk left when a row's width is an odd number of chunks, in x's own layout: its 32
// low nibbles, then its 32 high ones.
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

// One row of W (int4 in groups of G) against T rows of x, a step of 128 columns a time into
// `a`, with x's codes in the steps' layout (Int8ActView::step_codes).
template <int G, int T>
struct Int4Row {
  static constexpr int64_t kCols = 2 * kChunk;
  const uint8_t* w;     // the row's packed bytes
  const float* scales;  // the row's group scales
  int64_t groups;
  XRows<T> x;
  const int8_t* codes[T];  // rows of x, steps' layout

  // W's line kPrefetchBytes ahead, and the scales of the step that line belongs to: a second
  // stream, which without its own prefetch stalled the multiply-adds waiting on it.
  void prefetch_step(int64_t s) const {
    prefetch(w + s * kChunk + kPrefetchBytes);
    prefetch(scales + (s + kPrefetchBytes / kChunk) * (kCols / G));
  }

  // The scales of step s's 16 lanes for row t of x: the weight group's scale times x's. Lane
  // i < 8 covers chunk 0's columns 8i .. 8i + 7, lane 8 + i chunk 1's. The products are formed
  // four at most, in one 128-bit register, and spread over the lanes by one permute.
  __m512 step_scales(int t, int64_t s) const {
    if constexpr (G == 128) {
      return _mm512_set1_ps(scales[s] * x.scales[t][s]);
    } else if constexpr (G == 64) {
      const __m128 products = _mm_mul_ps(two(scales + 2 * s), two(x.scales[t] + 2 * s));
      const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
      return _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(products));
    } else {
      // Groups 4s .. 4s + 3 of 32 columns, x's chunks 2s and 2s + 1 of 64.
      const __m128 xs = two(x.scales[t] + 2 * s);
      const __m128 products = _mm_mul_ps(_mm_loadu_ps(scales + 4 * s), _mm_unpacklo_ps(xs, xs));
      const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
      return _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(products));
    }
  }

  void step(int64_t s, __m512 (&a)[T], __m512 (&)[T]) const {
    const __m512i low4 = _mm512_set1_epi8(0x0f);
    __m512i b = load(w + s * kChunk);
    // Kept in a register: GCC would otherwise read the line twice, once for each nibble half,
    // and the loads are what limit this loop once its data is in the cache.
    __asm__("" : "+v"(b));
    const __m512i lo = _mm512_and_si512(b, low4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(b, 4), low4);
    for (int t = 0; t < T; ++t) {
      const int8_t* xc = codes[t] + s * kCols;
      const __m512i sum = dot(dot(_mm512_setzero_si512(), lo, xc), hi, xc + kChunk);
      a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), step_scales(t, s), a[t]);
    }
  }

  // The chunk left over after the steps (G = 32 or 64 only: with G = 128 a row is whole
  // steps), then the nibble biases: sum_g w_scale[g] * group_bias[g], 16 groups a time.
  void finish(int64_t cols, __m512 (&a)[T]) const {
    if (cols % kCols != 0) {
      const int64_t c = cols / kChunk - 1;
      const __m512i wc = int4_chunk(w + c * (kChunk / 2));
      // Lane i < 8 covers the chunk's even columns 8i .. 8i + 6, lane 8 + i the odd ones: with
      // G = 32, lanes 0-3 and 8-11 are the first group's.
      const __m512 ws = G == 32 ? _mm512_mask_blend_ps(0xf0f0, _mm512_set1_ps(scales[2 * c]),
                                                        _mm512_set1_ps(scales[2 * c + 1]))
                                : _mm512_set1_ps(scales[c]);
      for (int t = 0; t < T; ++t) {
        const __m512i sum = dot(_mm512_setzero_si512(), wc, x.codes[t] + c * kChunk);
        const __m512 scale = _mm512_mul_ps(ws, _mm512_set1_ps(x.scales[t][c]));
        a[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, a[t]);
      }
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

// Output channels r0 .. r1 - 1 of rows t0 .. t0 + T - 1 of x, int8 weights.
template <int T>
void int8_rows(const Int8ActView& x, const QuantView& w, int64_t t0, int64_t r0, int64_t r1,
               float* y) {
  const XRows<T> rows(x, t0, 0);
  for (int64_t r = r0; r < r1; ++r) {
    const Int8Row<T> row{reinterpret_cast<const int8_t*>(w.values) + r * w.cols, rows};
    run_row<T>(row, w.cols, w.scales[r], y + t0 * w.rows + r, w.rows);
  }
}

// The same for int4 weights in groups of G.
template <int G, int T>
void int4_rows(const Int8ActView& x, const QuantView& w, int64_t t0, int64_t r0, int64_t r1,
               float* y) {
  const int64_t groups = w.cols / G;
  Int4Row<G, T> row{nullptr, nullptr, groups, XRows<T>(x, t0, groups), {}};
  for (int t = 0; t < T; ++t) row.codes[t] = x.step_codes + (t0 + t) * x.cols;
  for (int64_t r = r0; r < r1; ++r) {
    row.w = w.values + r * (w.cols / 2);
    row.scales = w.scales + r * groups;
    run_row<T>(row, w.cols, 1.0f, y + t0 * w.rows + r, w.rows);
  }
}

template <int G>
void int4_tiles(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                int64_t row_end) {
  const int64_t groups = w.cols / G;
  prefetch_start(w.values + row_begin * (w.cols / 2), (row_end - row_begin) * (w.cols / 2));
  prefetch_start(w.scales + row_begin * groups,
                 (row_end - row_begin) * groups * static_cast<int64_t>(sizeof(float)));
  for_each_int8_act_tile(x.n, row_begin, row_end, [&]<int T>(int64_t t, int64_t r0, int64_t r1) {
    int4_rows<G, T>(x, w, t, r0, r1, y);
  });
}

}  // namespace

void int8_act_rows_avx512(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                          int64_t row_end) {
  if (w.format == WeightFormat::kInt8) {
    prefetch_start(w.values + row_begin * w.cols, (row_end - row_begin) * w.cols);
    for_each_int8_act_tile(x.n, row_begin, row_end, [&]<int T>(int64_t t, int64_t r0, int64_t r1) {
      int8_rows<T>(x, w, t, r0, r1, y);
    });
    return;
  }
  assert(x.step_codes != nullptr && "int4 needs x in int4_step_layout's layout");
  switch (w.group_size) {
    case 32: int4_tiles<32>(x, w, y, row_begin, row_end); break;
    case 64: int4_tiles<64>(x, w, y, row_begin, row_end); break;
    default: int4_tiles<128>(x, w, y, row_begin, row_end); break;
  }
}

}  // namespace ms::ops
