// fp32 <-> bf16 / f16 conversion kernels, twins of lib/ops/cast.h on device pointers. Rounding
// is to nearest even in hardware (cvt.rn), which gives the CPU twins' bits for every non-NaN
// input; a NaN stays a NaN, though its payload may differ. Argument checks as in
// kernels/elementwise.cuh; the input and output buffers must be disjoint.
#pragma once

#include <cstddef>

#include "core/half.h"
#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// Each converts x: device (n) into out: device (n).
Status f32_to_bf16(const float* x, bf16* out, size_t n, Stream stream = nullptr);
Status bf16_to_f32(const bf16* x, float* out, size_t n, Stream stream = nullptr);
Status f32_to_f16(const float* x, f16* out, size_t n, Stream stream = nullptr);
Status f16_to_f32(const f16* x, float* out, size_t n, Stream stream = nullptr);
// out[i] = x[i] rounded to the nearest bf16, kept as fp32 (ops::round_to_bf16); out may be x.
Status round_to_bf16(const float* x, float* out, size_t n, Stream stream = nullptr);

}  // namespace ms::kernels
