// Plain loops the compiler vectorizes; each keeps to one rounding per arithmetic operation so
// the GPU twins can match bit for bit.
#include "ops/elementwise.h"

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

}  // namespace ms::ops
