// The quantized linear on the GPU, twin of ops::quantized_linear (lib/ops/quant_gemm.h) with the
// same arguments on device pointers: x: (n, w.cols) f32, w: a QuantView whose values and scales
// are in device memory, y: (n, w.rows) = x @ W^T, overwritten. W is decoded as it is read, 16
// bytes per load where its rows and x allow (quant_gemm.cu says when); results match the CPU
// twins within fp32 summation-order rounding. InvalidArgument (naming the argument) for a
// malformed w, null or misaligned buffers, y overlapping x, or n above 65535; n of 0 launches
// nothing.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"
#include "ops/quant.h"

namespace ms::kernels {

Status quantized_linear(const float* x, const ops::QuantView& w, float* y, int64_t n,
                        Stream stream = nullptr);

}  // namespace ms::kernels
