// Quantizing a row of activations is a few operations per value, beside a matrix of rows * cols
// weights it is then multiplied by; it runs on the calling thread, once per call, while the
// pool's other threads wait, so where the CPU has AVX2 a vector twin quantizes each chunk
// (quant_act_avx2.cc: 2% of the serving thread's time in an int4 decode step with this loop).
#include "ops/quant_act.h"

#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#if defined(MS_QUANT_AVX2)
#include "ops/quant_act_avx2.h"
#endif

namespace ms::ops {
namespace {

constexpr float kCodeMax = 127.0f;

// Rounds v (|v| <= 127.5) to the nearest integer, ties to even, as std::nearbyint does in the
// default mode: the sum with 1.5 * 2^23 has no fraction bits, so the addition itself rounds
// (exact arithmetic: no -ffast-math, and no contraction into a fused multiply-add, which
// lib/ops/CMakeLists.txt turns off for this file). A plain expression, where std::nearbyint is
// a library call on the baseline instruction set.
inline float round_to_even(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// Plain comparisons rather than std::fmax and std::fmin, which are library calls on the
// baseline instruction set (a decode step quantizes a few hundred thousand values).
// One scale's `cols` columns (64 or 128), laid out per chunk of 64.
void quantize_chunk(const float* x, int64_t cols, WeightFormat format, int8_t* codes, float* scale,
                    int32_t* bias) {
  float amax = 0;
  bool finite = true;
  for (int64_t i = 0; i < cols; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();  // false for inf and NaN
    amax = a > amax ? a : amax;
  }
  *scale = finite ? amax / kCodeMax : std::numeric_limits<float>::quiet_NaN();
  const float inverse = (finite && amax > 0) ? kCodeMax / amax : 0.0f;
  for (int64_t at = 0; at < cols; at += kActivationChunk) {
    int8_t q[kActivationChunk];  // column order
    for (int64_t c = 0; c < kActivationChunk; ++c) {
      float v = round_to_even(x[at + c] * inverse);
      v = v > kCodeMax ? kCodeMax : v;
      v = v < -kCodeMax ? -kCodeMax : v;
      q[c] = inverse == 0 ? int8_t{0} : static_cast<int8_t>(v);
    }
    if (format != WeightFormat::kInt4) {
      std::memcpy(codes + at, q, sizeof(q));
      continue;
    }
    constexpr int64_t kHalf = kActivationChunk / 2;
    for (int64_t j = 0; j < kHalf; ++j) {
      codes[at + j] = q[2 * j];
      codes[at + kHalf + j] = q[2 * j + 1];
    }
    for (int64_t oct = 0; oct < kActivationChunk / 8; ++oct) {
      int32_t sum = 0;
      for (int64_t k = 8 * oct; k < 8 * oct + 8; ++k) sum += q[k];
      bias[at / 8 + oct] = 8 * sum;
    }
  }
}

}  // namespace

std::string_view activation_format_name(ActivationFormat format) {
  switch (format) {
    case ActivationFormat::kF32:
      return "f32";
    case ActivationFormat::kInt8:
      return "int8";
  }
  return "unknown";
}

Result<ActivationFormat> parse_activation_format(std::string_view name) {
  for (ActivationFormat f : {ActivationFormat::kF32, ActivationFormat::kInt8}) {
    if (activation_format_name(f) == name) return f;
  }
  return InvalidArgument("activation format '" + std::string(name) + "' is not one of f32, int8");
}

int64_t activation_scale_cols(const QuantView& w) {
  constexpr int64_t kGroupSpan = 2 * kActivationChunk;
  return w.format == WeightFormat::kInt4 && w.group_size == kGroupSpan ? kGroupSpan
                                                                        : kActivationChunk;
}

bool activation_scale_cols_valid(WeightFormat format, int64_t scale_cols) {
  return scale_cols == kActivationChunk ||
         (scale_cols == 2 * kActivationChunk && format == WeightFormat::kInt4);
}

bool int8_activations_apply(const QuantView& w) {
  return (w.format == WeightFormat::kInt8 || w.format == WeightFormat::kInt4) &&
         w.cols % kActivationChunk == 0;
}

void quantize_activations(const float* x, int64_t n, int64_t cols, WeightFormat format,
                          int64_t scale_cols, Int8Activations* out, bool vector) {
  assert(activation_scale_cols_valid(format, scale_cols));
  assert(cols % scale_cols == 0);
  const int64_t chunks = cols / scale_cols;
  out->format = format;
  out->n = n;
  out->cols = cols;
  out->scale_cols = scale_cols;
  out->codes.resize(static_cast<size_t>(n * cols));
  out->scales.resize(static_cast<size_t>(n * chunks));
  out->nibble_bias.resize(format == WeightFormat::kInt4 ? static_cast<size_t>(n * cols / 8) : 0);
#if defined(MS_QUANT_AVX2)
  static const bool has_avx2 = __builtin_cpu_supports("avx2");
  const bool avx2 = vector && has_avx2;
#else
  constexpr bool avx2 = false;
  (void)vector;
#endif
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t at = t * cols + c * scale_cols;
      int8_t* codes = out->codes.data() + at;
      float* scale = out->scales.data() + t * chunks + c;
      int32_t* bias = format == WeightFormat::kInt4 ? out->nibble_bias.data() + at / 8 : nullptr;
#if defined(MS_QUANT_AVX2)
      if (avx2) {
        quantize_chunk_avx2(x + at, scale_cols, format == WeightFormat::kInt4, codes, scale, bias);
        continue;
      }
#endif
      quantize_chunk(x + at, scale_cols, format, codes, scale, bias);
    }
  }
}

void quantize_activations(const float* x, int64_t n, int64_t cols, WeightFormat format,
                          Int8Activations* out) {
  quantize_activations(x, n, cols, format, kActivationChunk, out, true);
}

void int4_group_bias(const Int8Activations& x, int64_t group_size, std::vector<float>* out) {
  assert(x.format == WeightFormat::kInt4 && group_size % 8 == 0 && x.cols % group_size == 0);
  assert(x.scale_cols % group_size == 0);
  const int64_t groups = x.cols / group_size, lanes = group_size / 8;
  out->resize(static_cast<size_t>(x.n * groups));
  for (int64_t t = 0; t < x.n; ++t) {
    const int32_t* bias = x.nibble_bias.data() + t * (x.cols / 8);
    for (int64_t g = 0; g < groups; ++g) {
      int32_t sum = 0;  // at most 8 * 127 * 128 in magnitude: exact, also as a float
      for (int64_t l = g * lanes; l < (g + 1) * lanes; ++l) sum += bias[l];
      (*out)[static_cast<size_t>(t * groups + g)] =
          static_cast<float>(sum) * x.scale(t, g * group_size);
    }
  }
}

void int4_step_layout(const Int8Activations& x, std::vector<int8_t>* codes) {
  assert(x.format == WeightFormat::kInt4);
  constexpr int64_t kHalf = kActivationChunk / 2, kStep = 2 * kActivationChunk;
  const int64_t steps = x.cols / kStep;
  codes->resize(x.codes.size());
  for (int64_t t = 0; t < x.n; ++t) {
    const int8_t* src = x.codes.data() + t * x.cols;
    int8_t* dst = codes->data() + t * x.cols;
    for (int64_t s = 0; s < steps; ++s) {
      // From x's layout: chunk 0's even and odd columns, then chunk 1's.
      const int8_t* in = src + s * kStep;
      int8_t* out = dst + s * kStep;
      std::memcpy(out, in, kHalf);
      std::memcpy(out + kHalf, in + 2 * kHalf, kHalf);
      std::memcpy(out + 2 * kHalf, in + kHalf, kHalf);
      std::memcpy(out + 3 * kHalf, in + 3 * kHalf, kHalf);
    }
    const int64_t tail = steps * kStep;
    std::memcpy(dst + tail, src + tail, static_cast<size_t>(x.cols - tail));
  }
}

}  // namespace ms::ops
