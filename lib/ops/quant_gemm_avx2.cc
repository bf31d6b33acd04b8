// The AVX2 + FMA path of the quantized linear: 8 floats a vector. Compiled with -mavx2 -mfma
// (lib/ops/CMakeLists.txt) and only called when the CPU reports both.
#include <immintrin.h>

#include "ops/quant_gemm_impl.h"

namespace ms::ops {
namespace {

struct Avx2Path {
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
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

  // The oct decode: 32 bytes, 64 columns; lane j holds columns 8j .. 8j + 7, one nibble each
  // (column 8j + k in nibble k). Without AVX-512 there is no 16-entry float lookup, so a code
  // goes through an integer: once i4_load has flipped each nibble's top bit (code + 8 becomes
  // the code's 4-bit two's complement), a nibble alone in the top four bits of a lane reads as
  // code * 2^28, which converts exactly. Two ways get it there, both exact, so they give the
  // same bits and GEMV and GEMM may differ in which they use:
  //   one row of x: decoding is most of the work, so the fewest instructions, a byte shuffle
  //     (byte k / 2 of each lane to the top, the rest zero) from a copy of the block keeping
  //     only the high nibbles (k odd) or only the low ones moved up (k even), made per block;
  //   several rows: the FMAs are most of the work and the sums fill the 16 vector registers;
  //     the shuffle's four index vectors would push sums out to memory, so a shift and a mask.
  // Measured on Zen 3 (quant_gemm_bench): in GEMV the shuffle beats the shift and mask, which
  // beats the forms that need a third operation per vector (masking the nibble down, then
  // converting and subtracting 8, or or-ing in 0x4B000000 and subtracting 2^23 + 8); in GEMM
  // the shift and mask beats the shuffle.
  static constexpr bool kInt4Oct = true;
  static constexpr float kInt4OctUnit = 0x1p28f;
  using Packed = __m256i;
  static Packed i4_load(const uint8_t* p) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)),
                            _mm256_set1_epi8(-0x78));
  }
  template <int k, int rows_of_x>
  static V i4_codes(const Packed& d) {
    if constexpr (rows_of_x == 1) {
      // The same two copies for every k of a block: the compiler makes them once.
      const __m256i odd = _mm256_and_si256(d, _mm256_set1_epi8(-0x10));
      const __m256i nibbles = k % 2 == 1 ? odd : _mm256_slli_epi32(_mm256_xor_si256(d, odd), 4);
      constexpr char b = k / 2, z = -128;  // an index with its top bit set writes zero
      const __m256i to_top = _mm256_setr_epi8(z, z, z, b, z, z, z, b + 4, z, z, z, b + 8, z, z, z,
                                              b + 12, z, z, z, b, z, z, z, b + 4, z, z, z, b + 8,
                                              z, z, z, b + 12);
      return _mm256_cvtepi32_ps(_mm256_shuffle_epi8(nibbles, to_top));
    } else {
      const __m256i top = k == 7 ? d : _mm256_slli_epi32(d, 28 - 4 * k);
      return _mm256_cvtepi32_ps(_mm256_and_si256(top, _mm256_set1_epi32(0xF0000000u)));
    }
  }
  // Lane j's 8 columns start at column 8j of the block: with groups of 32, lanes 0-3 are in the
  // block's first group and lanes 4-7 in its second; with 64 or 128 the block lies in one group
  // (half of one for 128, so only that group's scale is read).
  static V i4_block_scales(const float* scales, int group) {
    if (group == 32) {
      return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_broadcast_ss(scales)),
                                  _mm_broadcast_ss(scales + 1), 1);
    }
    return _mm256_broadcast_ss(scales);
  }
};

}  // namespace

void quant_rows_avx2(const float* x, const QuantView& w, float* y, int64_t n, int64_t row_begin,
                     int64_t row_end) {
  quant_rows<Avx2Path>(x, w, y, n, row_begin, row_end);
}

}  // namespace ms::ops
