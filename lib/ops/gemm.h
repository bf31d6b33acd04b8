// Matrix multiplication on the CPU through OpenBLAS, in the row-major convention the rest of
// the toolkit uses. The cuBLASLt twins in kernels/gemm.cuh take the same arguments.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "core/status.h"

namespace ms::ops {

enum class Transpose : bool { kNo = false, kYes = true };

// Row-major C = alpha * op(A) * op(B) + beta * C, with op(A): (m, k), op(B): (k, n), C: (m, n).
// A is stored (m, k) when ta is kNo and (k, m) when kYes, with lda elements between rows;
// likewise B is (k, n) or (n, k) with ldb, and C is (m, n) with ldc. Leading dimensions must be
// at least the stored row length (and 1), k at least 1: check_gemm_shape() below, asserted here
// as a programming error; m or n of 0 leaves C untouched. C must not overlap A or B.
void sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The same product with bf16 A and B, accumulated and written in fp32: each bf16 is widened
// exactly to fp32, so the result equals sgemm on the widened matrices.
void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, float* c,
               int64_t ldc);

// InvalidArgument naming the offending size when m, n, k or a leading dimension is out of range
// for the layout above (k < 1, negative sizes, ld shorter than a stored row); OK otherwise.
// The CPU twins assert it; the GPU entry points return it.
Status check_gemm_shape(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                        int64_t ldb, int64_t ldc);

// The stored row length of an operand: cols when not transposed, rows when transposed
// (A: gemm_stored_cols(ta, m, k); B: gemm_stored_cols(tb, k, n)).
constexpr int64_t gemm_stored_cols(Transpose t, int64_t rows, int64_t cols) {
  return t == Transpose::kNo ? cols : rows;
}

}  // namespace ms::ops
