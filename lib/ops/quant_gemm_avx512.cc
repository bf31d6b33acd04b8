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
  static V splat(float v) { return _mm512_set1_ps(v); }
  static float sum(V v) { return _mm512_reduce_add_ps(v); }
  static V bf16(const uint8_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static V i8(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
  }
  // Eight bytes hold columns c .. c + 15: their low and high nibbles, interleaved byte by
  // byte, are the codes in column order.
  static V i4(const uint8_t* row, int64_t c) {
    const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + c / 2));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(bytes, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
    const __m512i codes = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(codes, _mm512_set1_epi32(8)));
  }
};

}  // namespace

void quant_rows_avx512(const float* x, const QuantView& w, float* y, int64_t n,
                       int64_t row_begin, int64_t row_end) {
  quant_rows<Avx512Path>(x, w, y, n, row_begin, row_end);
}

}  // namespace ms::ops
