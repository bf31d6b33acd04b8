// Plain loops the compiler vectorizes; each keeps to one rounding per arithmetic operation so
// the GPU twins can match bit for bit.
#include "ops/elementwise.h"

#include <algorithm>
#include <cstring>

namespace ms::ops {

void add(const float* a, const float* b, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void scale(const float* x, float alpha, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = alpha * x[i];
}

void axpy(float alpha, const float* x, float* y, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float product = alpha * x[i];
    y[i] += product;
  }
}

void fill(float* x, size_t n, float value) { std::fill_n(x, n, value); }

void copy(const float* src, float* dst, size_t n) {
  std::memmove(dst, src, sizeof(float) * n);
}

void gather_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                 float* dst) {
  for (int64_t i = 0; i < count; ++i) std::copy_n(src + rows[i] * width, width, dst + i * width);
}

void scatter_rows(const float* src, const int64_t* rows, int64_t count, int64_t width,
                  float* dst) {
  for (int64_t i = 0; i < count; ++i) std::copy_n(src + i * width, width, dst + rows[i] * width);
}

void add_to_columns(float* x, const float* column, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] += column[j];
  }
}

}  // namespace ms::ops
