// sgemm forwards to cblas_sgemm (row-major); gemm_bf16 widens its operands to fp32 and reuses it,
// which is exact, so the CPU reference for the bf16 GPU path carries no extra rounding.
#include "ops/gemm.h"

#include <cblas.h>

#include <cassert>
#include <climits>
#include <string>
#include <vector>

namespace ms::ops {
namespace {

CBLAS_TRANSPOSE to_cblas(Transpose t) { return t == Transpose::kNo ? CblasNoTrans : CblasTrans; }

// OpenBLAS takes int sizes.
[[maybe_unused]] bool fits_blas_int(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                                    int64_t ldc) {
  for (int64_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > INT_MAX) return false;
  }
  return true;
}

// Copies the stored (rows, cols) bf16 matrix with leading dimension ld into a dense fp32 one.
std::vector<float> widen_matrix(const bf16* x, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = bf16_to_float(x[r * ld + c].bits);
  }
  return out;
}

std::string size_error(const char* what, int64_t value, const char* rule) {
  return "gemm: " + std::string(what) + " = " + std::to_string(value) + " " + rule;
}

}  // namespace

Status check_gemm_shape(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, int64_t lda,
                        int64_t ldb, int64_t ldc) {
  if (m < 0) return InvalidArgument(size_error("m", m, "is negative"));
  if (n < 0) return InvalidArgument(size_error("n", n, "is negative"));
  if (k < 1) return InvalidArgument(size_error("k", k, "must be at least 1"));
  const int64_t a_cols = gemm_stored_cols(ta, m, k);
  const int64_t b_cols = gemm_stored_cols(tb, k, n);
  if (lda < a_cols || lda < 1) {
    return InvalidArgument(size_error("lda", lda, "is shorter than a stored row of A") + " (" +
                           std::to_string(a_cols) + " elements)");
  }
  if (ldb < b_cols || ldb < 1) {
    return InvalidArgument(size_error("ldb", ldb, "is shorter than a stored row of B") + " (" +
                           std::to_string(b_cols) + " elements)");
  }
  if (ldc < n || ldc < 1) {
    return InvalidArgument(size_error("ldc", ldc, "is shorter than a row of C") + " (" +
                           std::to_string(n) + " elements)");
  }
  return Status::OK();
}

void sgemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  assert(check_gemm_shape(ta, tb, m, n, k, lda, ldb, ldc).ok());
  assert(fits_blas_int(m, n, k, lda, ldb, ldc));
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasRowMajor, to_cblas(ta), to_cblas(tb), static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), alpha, a, static_cast<int>(lda), b, static_cast<int>(ldb), beta,
              c, static_cast<int>(ldc));
}

void gemm_bf16(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
               const bf16* a, int64_t lda, const bf16* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  assert(check_gemm_shape(ta, tb, m, n, k, lda, ldb, ldc).ok());
  if (m == 0 || n == 0) return;
  const int64_t a_rows = ta == Transpose::kNo ? m : k;
  const int64_t b_rows = tb == Transpose::kNo ? k : n;
  const int64_t a_cols = gemm_stored_cols(ta, m, k);
  const int64_t b_cols = gemm_stored_cols(tb, k, n);
  const std::vector<float> wide_a = widen_matrix(a, a_rows, a_cols, lda);
  const std::vector<float> wide_b = widen_matrix(b, b_rows, b_cols, ldb);
  sgemm(ta, tb, m, n, k, alpha, wide_a.data(), a_cols, wide_b.data(), b_cols, beta, c, ldc);
}

}  // namespace ms::ops
