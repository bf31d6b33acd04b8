// The AVX2 twin of quant_act.cc's quantize_chunk, 8 values an instruction. It takes the same
// steps in the same IEEE operations (no fused multiply-add: the file is compiled without FMA),
// so every code, scale and bias has the scalar loop's bits:
//   max|x| as a vector max (exact, in any order), finiteness as an ordered compare with FLT_MAX;
//   codes as (x * inverse + 1.5 * 2^23) - 1.5 * 2^23 (ties to even), clamped to [-127, 127] and
//   converted exactly; packed to bytes in column order, then for int4 split into the even and
//   the odd columns; nibble biases as 8 times each 8 columns' integer sum.
// Like the other AVX2 files it calls no inline function of another header, so it emits no
// shared (COMDAT) code the linker could pick for the baseline files.
#include <immintrin.h>

#include "ops/quant_act_avx2.h"

namespace ms::ops {
namespace {

constexpr float kCodeMax = 127.0f;
constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
constexpr float kFloatMax = 3.40282347e+38f;

float max_lane(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Columns 32k .. 32k + 31 as bytes in column order, from their four vectors of int32 codes.
__m256i pack_columns(const __m256i* ints) {
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(ints[0], ints[1]),
                                           _mm256_packs_epi32(ints[2], ints[3]));
  // The packs interleave the 128-bit halves: dword j of the result holds columns
  // 4 * order[j] .. + 3.
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// 8 times the sums of four vectors of int32 codes (four runs of 8 columns).
__m128i nibble_biases(const __m256i* ints) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(ints[0], ints[1]),
                                      _mm256_hadd_epi32(ints[2], ints[3]));
  const __m128i sums = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  return _mm_slli_epi32(sums, 3);
}

// The codes and biases of one chunk of 64 columns, given its scale's inverse (not 0).
void codes_of_chunk(const float* x, __m256 inv, bool int4, int8_t* codes, int32_t* bias) {
  const __m256 magic = _mm256_set1_ps(kMagic);
  const __m256 top = _mm256_set1_ps(kCodeMax), bottom = _mm256_set1_ps(-kCodeMax);
  __m256i ints[8];
  for (int i = 0; i < 8; ++i) {
    __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), inv), magic),
                             magic);
    r = _mm256_max_ps(_mm256_min_ps(r, top), bottom);
    ints[i] = _mm256_cvtps_epi32(r);
  }
  const __m256i low = pack_columns(ints), high = pack_columns(ints + 4);
  if (!int4) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), low);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 32), high);
    return;
  }
  // Within each 16 bytes the even columns first, then the odd; then the quads reordered so a
  // 32-column vector holds its 16 even columns, then its 16 odd ones.
  const __m256i split = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15,
                                         0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m256i s0 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(low, split), 0xD8);
  const __m256i s1 = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(high, split), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), _mm256_permute2x128_si256(s0, s1, 0x20));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + 32),
                      _mm256_permute2x128_si256(s0, s1, 0x31));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bias), nibble_biases(ints));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(bias + 4), nibble_biases(ints + 4));
}

}  // namespace

void quantize_chunk_avx2(const float* x, int64_t cols, bool int4, int8_t* codes, float* scale,
                         int32_t* bias) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  __m256 finite = _mm256_cmp_ps(amax, amax, _CMP_EQ_OQ);  // all ones
  for (int64_t i = 0; i < cols; i += 8) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
    // False for inf and NaN, as the scalar loop's a <= FLT_MAX.
    finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, _mm256_set1_ps(kFloatMax), _CMP_LE_OQ));
    amax = _mm256_max_ps(amax, a);
  }
  const bool all_finite = _mm256_movemask_ps(finite) == 0xff;
  const float max_abs = max_lane(amax);
  *scale = all_finite ? max_abs / kCodeMax : __builtin_nanf("");
  const float inverse = (all_finite && max_abs > 0) ? kCodeMax / max_abs : 0.0f;
  for (int64_t at = 0; at < cols; at += 64) {
    if (inverse == 0) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + at), _mm256_setzero_si256());
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes + at + 32), _mm256_setzero_si256());
      if (int4) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(bias + at / 8), _mm256_setzero_si256());
      }
      continue;
    }
    codes_of_chunk(x + at, _mm256_set1_ps(inverse), int4, codes + at,
                   int4 ? bias + at / 8 : nullptr);
  }
}

}  // namespace ms::ops
