// The AVX2 integer kernels. A 256-bit vpmaddubsw multiplies 32 unsigned bytes by 32 signed ones
// and adds neighbouring pairs into int16; vpmaddwd with ones adds those pairs into 8 int32
// lanes, lane i holding the sum over bytes 4i .. 4i + 3. Each lane's integer sum is exact; it is
// converted and multiplied into the f32 total once per chunk of 64 columns, lane by lane, and
// the 8 lanes (times two accumulators, alternating chunks) are summed at the end.
//   int4: the 32 packed bytes of a chunk, masked to their low nibbles, meet the chunk's 32
//     even-column codes, and shifted down, its odd ones (Int8Activations' int4 layout); the
//     nibbles are code + 8 (unsigned, as vpmaddubsw needs), so 8 times the codes' sum must
//     come off: not chunk by chunk but once per output, sum_g w_scale[g] * group_bias[g]
//     (Int8ActView::group_bias), a vector multiply-add per 8 groups at the end of the row. Lane
//     i covers columns 8i .. 8i + 7, so with groups of 32 lanes 0-3 take the first group's scale
//     and 4-7 the second's. Per pair 2 * 15 * 127 and per int16 lane twice that: no
//     saturation. With groups of 128 the activations have one scale per 128 columns too
//     (activation_scale_cols), so a step takes a whole group: the int16 sums of its two chunks
//     are added (four times 2 * 15 * 127 still fits) before one vpmaddwd, conversion and
//     scaling, and lane i covers columns 8i .. 8i + 7 of both chunks.
//   int8: the weights are signed, so the unsigned operand is |w| and the signed one x with w's
//     sign (vpsignb); 2 * 128 * 127 fits an int16, even for a code of -128 from a file. The
//     row's scale multiplies the total.
// Each output's sums run in the same order whatever the number of rows of x beside it, so a row
// of x gives the same bits alone (a decode step) as in a batch (a prefill).
#include <immintrin.h>

#include "ops/quant_gemm_int8_act.h"

namespace ms::ops {
namespace {

constexpr int64_t kChunk = 64;
// How far ahead of the chunk it multiplies a row kernel asks for W's bytes. The rows a task
// walks are contiguous, so this runs on into the next row; without it the hardware prefetchers
// stop at every 4 KiB page and the loads wait for memory (perf: half the kernel's samples).
constexpr int64_t kPrefetchBytes = 1024;

void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

float sum_lanes(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

__m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// The low and the high nibbles of a chunk's 32 packed bytes.
struct Nibbles {
  __m256i lo, hi;
  explicit Nibbles(const uint8_t* p) {
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i b = load(p);
    lo = _mm256_and_si256(b, low4);
    hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), low4);
  }
  // Neighbouring pairs of nibble * code over the chunk whose codes start at xc, as int16.
  __m256i pairs(const int8_t* xc) const {
    return _mm256_add_epi16(_mm256_maddubs_epi16(lo, load(xc)),
                            _mm256_maddubs_epi16(hi, load(xc + kChunk / 2)));
  }
};

// acc + the int32 sums of the int16 `pairs` times ws times x's scale *xs.
__m256 add_scaled(__m256i pairs, __m256 ws, const float* xs, __m256 acc) {
  const __m256i sums = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
  const __m256 scale = _mm256_mul_ps(ws, _mm256_broadcast_ss(xs));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
}

// acc - the row's nibble biases, sum_g scales[g] * group_bias[g] over `groups` groups, 8 a time.
__m256 less_nibble_biases(const float* scales, const float* group_bias, int64_t groups,
                          __m256 acc) {
  int64_t g = 0;
  for (; g + 8 <= groups; g += 8) {
    acc = _mm256_fnmadd_ps(_mm256_loadu_ps(scales + g), _mm256_loadu_ps(group_bias + g), acc);
  }
  if (g < groups) {
    const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(groups - g)),
                                             _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    acc = _mm256_fnmadd_ps(_mm256_maskload_ps(scales + g, lanes),
                           _mm256_maskload_ps(group_bias + g, lanes), acc);
  }
  return acc;
}

// One row of W (int4, groups of G = 32 or 64) against T rows of x, chunk by chunk.
template <int G, int T>
struct Int4Row {
  static constexpr int64_t kCols = kChunk;  // columns a step takes
  const uint8_t* w;     // the row's packed bytes
  const float* scales;  // the row's group scales
  int64_t groups;
  XRows<T> x;

  // Steps c and c + 1 (c even): 64 bytes, one cache line.
  void prefetch_pair(int64_t c) const { prefetch(w + c * (kChunk / 2) + kPrefetchBytes); }

  void chunk(int64_t c, __m256 (&acc)[T]) const {
    const Nibbles nibbles(w + c * (kChunk / 2));
    __m256 ws;
    if constexpr (G == 32) {
      ws = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(scales + 2 * c)),
                                _mm_broadcast_ss(scales + 2 * c + 1), 1);
    } else {
      ws = _mm256_broadcast_ss(scales + c);
    }
    for (int t = 0; t < T; ++t) {
      acc[t] = add_scaled(nibbles.pairs(x.codes[t] + c * kChunk), ws, x.scales[t] + c, acc[t]);
    }
  }

  void finish(__m256 (&acc)[T]) const {
    for (int t = 0; t < T; ++t) {
      acc[t] = less_nibble_biases(scales, x.group_bias[t], groups, acc[t]);
    }
  }
};

// One row of W (int4, groups of 128) against T rows of x whose scales are per 128 columns, a
// group a step.
template <int T>
struct Int4Row<128, T> {
  static constexpr int64_t kCols = 2 * kChunk;
  const uint8_t* w;
  const float* scales;
  int64_t groups;
  XRows<T> x;

  // Steps c and c + 1: a cache line each.
  void prefetch_pair(int64_t c) const {
    prefetch(w + c * kChunk + kPrefetchBytes);
    prefetch(w + (c + 1) * kChunk + kPrefetchBytes);
  }

  void chunk(int64_t c, __m256 (&acc)[T]) const {
    const Nibbles first(w + c * kChunk), second(w + c * kChunk + kChunk / 2);
    const __m256 ws = _mm256_broadcast_ss(scales + c);
    for (int t = 0; t < T; ++t) {
      const int8_t* xc = x.codes[t] + c * kCols;
      const __m256i pairs = _mm256_add_epi16(first.pairs(xc), second.pairs(xc + kChunk));
      acc[t] = add_scaled(pairs, ws, x.scales[t] + c, acc[t]);
    }
  }

  void finish(__m256 (&acc)[T]) const {
    for (int t = 0; t < T; ++t) {
      acc[t] = less_nibble_biases(scales, x.group_bias[t], groups, acc[t]);
    }
  }
};

// One row of W (int8) against T rows of x.
template <int T>
struct Int8Row {
  static constexpr int64_t kCols = kChunk;
  const int8_t* w;  // the row's codes
  XRows<T> x;

  // Chunks c and c + 1: a cache line each.
  void prefetch_pair(int64_t c) const {
    prefetch(w + c * kChunk + kPrefetchBytes);
    prefetch(w + (c + 1) * kChunk + kPrefetchBytes);
  }

  void chunk(int64_t c, __m256 (&acc)[T]) const {
    const __m256i w0 = load(w + c * kChunk), w1 = load(w + c * kChunk + 32);
    const __m256i a0 = _mm256_sign_epi8(w0, w0), a1 = _mm256_sign_epi8(w1, w1);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t = 0; t < T; ++t) {
      const int8_t* xc = x.codes[t] + c * kChunk;
      const __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(load(xc), w0));
      const __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(load(xc + 32), w1));
      const __m256i sums =
          _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
      acc[t] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_broadcast_ss(x.scales[t] + c), acc[t]);
    }
  }

  void finish(__m256 (&)[T]) const {}
};

// Runs a row kernel over a row of `cols` columns, Row::kCols a step, alternating two
// accumulators, and writes the T outputs, times `row_scale`, to y[(t0 + t) * ld].
template <int T, class Row>
void run_row(const Row& row, int64_t cols, float row_scale, float* y, int64_t ld) {
  const int64_t chunks = cols / Row::kCols;
  __m256 even[T], odd[T];
  for (int t = 0; t < T; ++t) even[t] = odd[t] = _mm256_setzero_ps();
  int64_t c = 0;
  // Four chunks per pass halve the loop's own instructions (pointer steps, compare, branch),
  // which int4's short chunks notice; the accumulators still alternate chunk by chunk.
  for (; c + 4 <= chunks; c += 4) {
    row.prefetch_pair(c);
    row.prefetch_pair(c + 2);
    row.chunk(c, even);
    row.chunk(c + 1, odd);
    row.chunk(c + 2, even);
    row.chunk(c + 3, odd);
  }
  for (; c + 2 <= chunks; c += 2) {
    row.prefetch_pair(c);
    row.chunk(c, even);
    row.chunk(c + 1, odd);
  }
  if (c < chunks) row.chunk(c, even);
  row.finish(even);
  for (int t = 0; t < T; ++t) y[t * ld] = sum_lanes(_mm256_add_ps(even[t], odd[t])) * row_scale;
}

// Output channel r of rows t0 .. t0 + T - 1 of x (`rows`); `groups` is w's scales per row.
template <int T>
void dot_row(const XRows<T>& rows, const QuantView& w, int64_t groups, int64_t t0, int64_t r,
             float* y) {
  const int64_t cols = w.cols;
  float* out = y + t0 * w.rows + r;
  if (w.format == WeightFormat::kInt8) {
    const Int8Row<T> row{reinterpret_cast<const int8_t*>(w.values) + r * w.cols, rows};
    return run_row<T>(row, cols, w.scales[r], out, w.rows);
  }
  const uint8_t* bytes = w.values + r * (w.cols / 2);
  const float* scales = w.scales + r * groups;
  switch (w.group_size) {
    case 32:
      return run_row<T>(Int4Row<32, T>{bytes, scales, groups, rows}, cols, 1.0f, out, w.rows);
    case 64:
      return run_row<T>(Int4Row<64, T>{bytes, scales, groups, rows}, cols, 1.0f, out, w.rows);
    default:
      return run_row<T>(Int4Row<128, T>{bytes, scales, groups, rows}, cols, 1.0f, out, w.rows);
  }
}

// Output channels r0 .. r1 - 1 of rows t0 .. t0 + T - 1 of x. Where those rows start is worked
// out once here, not per channel (a division, beside a channel's few hundred cycles at decode).
template <int T>
void dot_rows(const Int8ActView& x, const QuantView& w, int64_t t0, int64_t r0, int64_t r1,
              float* y) {
  const int64_t groups = w.format == WeightFormat::kInt4 ? w.cols / w.group_size : 0;
  const XRows<T> rows(x, t0, groups);
  for (int64_t r = r0; r < r1; ++r) dot_row<T>(rows, w, groups, t0, r, y);
}

}  // namespace

void int8_act_rows_avx2(const Int8ActView& x, const QuantView& w, float* y, int64_t row_begin,
                        int64_t row_end) {
  for_each_int8_act_tile(x.n, row_begin, row_end, [&]<int T>(int64_t t, int64_t r0, int64_t r1) {
    dot_rows<T>(x, w, t, r0, r1, y);
  });
}

}  // namespace ms::ops
