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
  // Eight bytes hold columns c .. c + 15: the low word's nibbles fill lanes 0-7, the high
  // word's lanes 8-15, each lane shifting its word by 4 * (lane % 8).
  static V i4(const uint8_t* row, int64_t c) {
    int32_t words[2];
    std::memcpy(words, row + c / 2, 8);
    const __m512i spread = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set1_epi32(words[0])), _mm256_set1_epi32(words[1]), 1);
    const __m512i shifts =
        _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i nibbles =
        _mm512_and_si512(_mm512_srlv_epi32(spread, shifts), _mm512_set1_epi32(15));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(nibbles, _mm512_set1_epi32(8)));
  }
};

}  // namespace

void quant_rows_avx512(const float* x, const QuantView& w, float* y, int64_t n,
                       int64_t row_begin, int64_t row_end) {
  quant_rows<Avx512Path>(x, w, y, n, row_begin, row_end);
}

}  // namespace ms::ops
