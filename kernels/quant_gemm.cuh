// The quantized linear on the GPU, twin of ops::quantized_linear (lib/ops/quant_gemm.h) with the
// same arguments on device pointers: x: (n, w.cols) f32, w: a QuantView whose values and scales
// are in device memory, y: (n, w.rows) = x @ W^T, overwritten. W is decoded as it is read, 16
// bytes per load where its rows and x allow (quant_gemm.cu says when); results match the CPU
// twins within fp32 summation-order rounding. InvalidArgument (naming the argument) for a
// malformed w, null or misaligned buffers, y overlapping x, or n above 65535; n of 0 launches
// nothing. With int8 activations (quant_gemm_int8_act.cu) x is quantized on the device as
// ops::quantize_activations does, into scratch from the stream-ordered allocator, and W
// multiplied by the codes with __dp4a; f32 and bf16 weights, and widths that are not a multiple
// of 64, take the f32-activation kernels, as on the CPU (and so do weights whose values are not
// 16-byte aligned on the device).
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"
#include "ops/quant.h"
#include "ops/quant_act.h"

namespace ms::kernels {

Status quantized_linear(const float* x, const ops::QuantView& w, float* y, int64_t n,
                        Stream stream = nullptr);
Status quantized_linear(const float* x, const ops::QuantView& w, float* y, int64_t n,
                        ops::ActivationFormat activations, Stream stream = nullptr);

// x: (n, cols) f32 on the device -> codes: (n, cols) int8 (16-byte aligned) and scales:
// (n, cols / scale_cols), laid out for weights in `format` exactly as ops::quantize_activations
// lays out Int8Activations::codes and ::scales (the same bits). scale_cols is 64, or 128 for
// int4 (ops::activation_scale_cols); cols must be a multiple of it.
Status quantize_activations(const float* x, int64_t n, int64_t cols, ops::WeightFormat format,
                            int64_t scale_cols, signed char* codes, float* scales,
                            Stream stream = nullptr);

// The argument checks every quantized_linear makes (the InvalidArgument cases above).
Status check_quantized_linear_args(const float* x, const ops::QuantView& w, const float* y,
                                   int64_t n);

}  // namespace ms::kernels
