// RMSNorm: rows in parallel; the sum of squares and the backward's row dot product are taken in
// double so long rows lose no precision.
#include "ops/rmsnorm.h"

#include <cmath>

#include "ops/parallel.h"

namespace ms::ops {

void rmsnorm_forward(const float* x, const float* weight, float* out, float* rstd, int64_t n,
                     int64_t d, float eps) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* xi = x + i * d;
      double sum_sq = 0;
      for (int64_t c = 0; c < d; ++c) sum_sq += double{xi[c]} * xi[c];
      const float r = static_cast<float>(1.0 / std::sqrt(sum_sq / d + eps));
      rstd[i] = r;
      float* oi = out + i * d;
      for (int64_t c = 0; c < d; ++c) oi[c] = weight[c] * (xi[c] * r);
    }
  }, 8);
}

// With y = w * x * r and r = (mean(x^2) + eps)^(-1/2):
//   dx = r * (w * dy) - x * r^3 / d * sum_c(w_c * dy_c * x_c),  dw += dy * x * r.
void rmsnorm_backward(const float* x, const float* weight, const float* rstd, const float* dout,
                      float* dx, float* dweight, int64_t n, int64_t d) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* xi = x + i * d;
      const float* gi = dout + i * d;
      double dot = 0;
      for (int64_t c = 0; c < d; ++c) dot += double{weight[c]} * gi[c] * xi[c];
      const float r = rstd[i];
      const float k = static_cast<float>(dot * r * r * r / d);
      float* dxi = dx + i * d;
      for (int64_t c = 0; c < d; ++c) dxi[c] += r * (weight[c] * gi[c]) - xi[c] * k;
    }
  }, 8);
  parallel_for(d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * d;
      const float* gi = dout + i * d;
      for (int64_t c = c0; c < c1; ++c) dweight[c] += gi[c] * (xi[c] * rstd[i]);
    }
  }, 64);
}

}  // namespace ms::ops
