// Bulk conversions between fp32 and the 16-bit float formats (bf16, f16), element by element
// through core/half.h: round-to-nearest-even, NaN stays NaN, overflow becomes infinity. The CUDA
// twins in kernels/cast.cuh produce the same bits for every non-NaN input.
#pragma once

#include <cstddef>

#include "core/half.h"

namespace ms::ops {

// Each converts x: (n) into out: (n); the buffers must not overlap.
void f32_to_bf16(const float* x, bf16* out, size_t n);
void bf16_to_f32(const bf16* x, float* out, size_t n);
void f32_to_f16(const float* x, f16* out, size_t n);
void f16_to_f32(const f16* x, float* out, size_t n);

// out[i] = x[i] rounded to the nearest bf16 (ties to even), kept as fp32: what a bf16 matmul
// reads, in the layout the fp32 ops take (ops/backend.h, MatmulPrecision::kBf16). out may be x.
void round_to_bf16(const float* x, float* out, size_t n);

}  // namespace ms::ops
