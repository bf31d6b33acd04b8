// Loops over the scalar conversions of core/half.h, which are exact bit recipes, so these
// results are identical on every CPU.
#include "ops/cast.h"

namespace ms::ops {

void f32_to_bf16(const float* x, bf16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i].bits = float_to_bf16(x[i]);
}

void bf16_to_f32(const bf16* x, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(x[i].bits);
}

void f32_to_f16(const float* x, f16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i].bits = float_to_f16(x[i]);
}

void f16_to_f32(const f16* x, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = f16_to_float(x[i].bits);
}

void round_to_bf16(const float* x, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = bf16_to_float(float_to_bf16(x[i]));
}

}  // namespace ms::ops
