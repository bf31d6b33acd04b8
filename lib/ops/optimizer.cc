// AdamW and LAMB element loops; see optimizer.h. Moved here from train/optimizer.cc with the
// arithmetic unchanged, so training's values did not move.
#include "ops/optimizer.h"

#include <cmath>

namespace ms::ops {

void adamw_update(const AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                  float* m, float* v, int64_t n) {
  const float decay = weight_decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
  const float step_size = c.lr * c.inv_bias1;
  for (int64_t i = 0; i < n; ++i) {
    const float grad = g[i] * c.grad_scale;
    m[i] = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    v[i] = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(v[i]) * c.inv_sqrt_bias2 + c.eps;
    w[i] = w[i] * decay - step_size * (m[i] / denom);
  }
}

void lamb_direction(const AdamCoefficients& c, bool weight_decay, const float* w,
                    const float* g, float* m, float* v, float* d, double* norms, int64_t n) {
  const float decay = weight_decay ? c.weight_decay : 0.0f;
  double w_sq = 0, d_sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float grad = g[i] * c.grad_scale;
    m[i] = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    v[i] = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
    const float adam = (m[i] * c.inv_bias1) / (std::sqrt(v[i]) * c.inv_sqrt_bias2 + c.eps);
    d[i] = adam + decay * w[i];
    w_sq += static_cast<double>(w[i]) * w[i];
    d_sq += static_cast<double>(d[i]) * d[i];
  }
  norms[0] = w_sq;
  norms[1] = d_sq;
}

void lamb_update(float step, const float* d, float* w, int64_t n) {
  for (int64_t i = 0; i < n; ++i) w[i] -= step * d[i];
}

}  // namespace ms::ops
