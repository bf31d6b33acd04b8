// The AVX-512F path of the quantized linear: 16 floats a vector. Compiled with -mavx512f
// (lib/ops/CMakeLists.txt, when the compiler accepts it) and only called when the CPU reports it.
#include <immintrin.h>

#include "ops/quant_gemm_impl.h"

namespace ms::ops {
namespace {

struct Avx512Path {
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static V bf16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static V i8(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
  // The oct decode: 64 bytes, 128 columns; lane j holds columns 8j .. 8j + 7, one nibble each.
  static constexpr bool kInt4Oct = true;
  static constexpr float kInt4OctUnit = 1.0f;  // the table gives the codes themselves
  using Packed = __m512i;
  static Packed i4_load(const uint8_t* p) { return _mm512_loadu_si512(p); }
  // The lookup reads the low four bits of a lane, so nibble k only needs shifting down.
  template <int k, int rows_of_x>
  static V i4_codes(const Packed& d) {
    const __m512 table =
        _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm512_permutexvar_ps(k == 0 ? d : _mm512_srli_epi32(d, 4 * k), table);
  }
  // Lane j's 8 columns start at column 8j of the block: group 8j / G of those the block covers
  // (128 / G of them, read with a mask so nothing past them is touched).
  static V i4_block_scales(const float* scales, int group) {
    const int count = 128 / group;
    const __m512 loaded = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << count) - 1), scales);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i index = _mm512_srli_epi32(_mm512_slli_epi32(lane, 3), __builtin_ctz(group));
    return _mm512_permutexvar_ps(index, loaded);
  }
  // The group's 16 possible weights, (code - 8) * s, as a table indexed by code.
  static V i4_scale(float s) {
    const __m512 codes = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    return _mm512_mul_ps(codes, _mm512_set1_ps(s));
  }
  // Sixteen bytes, columns c .. c + 31: byte j widened to lane j; the table lookup reads the
  // low four bits of a lane, so the low nibbles index it directly and the high ones after a
  // shift.
  static void i4(const uint8_t* bytes, V table, V& even, V& odd) {
    const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
    even = _mm512_permutexvar_ps(b, table);
    odd = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), table);
  }
};

}  // namespace

void quant_rows_avx512(const float* x, const QuantView& w, float* y, int64_t n,
                       int64_t row_begin, int64_t row_end) {
  quant_rows<Avx512Path>(x, w, y, n, row_begin, row_end);
}

}  // namespace ms::ops
