// The AVX2 + FMA path of the quantized linear: 8 floats a vector. Compiled with -mavx2 -mfma
// (lib/ops/CMakeLists.txt) and only called when the CPU reports both.
#include <immintrin.h>

#include "ops/quant_gemm_impl.h"

namespace ms::ops {
namespace {

struct Avx2Path {
  using V = __m256;
  static constexpr bool kInt4Oct = false;  // the pair decode only (quant_gemm_impl.h)
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static float sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static V bf16(const uint8_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static V i8(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  }
  static V i4_scale(float s) { return _mm256_set1_ps(s); }
  // Eight bytes, columns c .. c + 15: byte j widened to lane j holds column c + 2j in its low
  // nibble and c + 2j + 1 in its high one, each as code + 8.
  static void i4(const uint8_t* bytes, V scale, V& even, V& odd) {
    const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
    const __m256i eight = _mm256_set1_epi32(8);
    const __m256i lo = _mm256_sub_epi32(_mm256_and_si256(b, _mm256_set1_epi32(15)), eight);
    const __m256i hi = _mm256_sub_epi32(_mm256_srli_epi32(b, 4), eight);
    even = _mm256_mul_ps(_mm256_cvtepi32_ps(lo), scale);
    odd = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), scale);
  }
};

}  // namespace

void quant_rows_avx2(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                     int64_t row_end) {
  quant_rows<Avx2Path>(x, w, y, n, row_begin, row_end);
}

}  // namespace ms::ops
