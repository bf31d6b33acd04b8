// Matrix multiplication on the GPU through cuBLASLt, twins of lib/ops/gemm.h: the same
// row-major arguments on device pointers, plus the stream. fp32 runs with fp32 compute (no TF32),
// so results match the OpenBLAS twin to within summation-order rounding; the bf16 form reads bf16
// A and B and accumulates and writes fp32, like the CPU gemm_bf16.
//
// Shapes are checked by ops::check_gemm_shape (InvalidArgument); m or n of 0 does nothing. One
// cuBLASLt handle per device is created on first use and kept for the life of the process, and
// so is each shape's plan (descriptors and the heuristic's algorithm, chosen once per device,
// types, transposes, sizes, leading dimensions and operand alignments). No workspace is used,
// so calls on different streams never share scratch memory and no algorithm splits K over one
// (the same call gives the same bits). Call them as
// kernels::sgemm: an unqualified call also finds ops::sgemm through ops::Transpose.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"
#include "kernels/device.h"
#include "ops/gemm.h"

namespace ms::kernels {

using ops::Transpose;

// Row-major C = alpha * op(A) * op(B) + beta * C on the current device; layouts as in
// ops::sgemm. a, b, c: device pointers.
Status sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
             const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
             int64_t ldc, Stream stream = nullptr);

// The same with bf16 A and B, fp32 accumulation and fp32 C (as ops::gemm_bf16).
Status gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
                 const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, float* c,
                 int64_t ldc, Stream stream = nullptr);

}  // namespace ms::kernels
