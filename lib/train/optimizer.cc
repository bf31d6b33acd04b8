// AdamW and LAMB element loops. Per-element arithmetic is fp32 in a fixed order (as PyTorch's
// single-tensor AdamW does it), with the per-step scalars computed once in double; the
// per-parameter norms of LAMB are accumulated in double so that their value does not depend
// on how a parameter is split between ZeRO shards beyond rounding of the final sum.
#include "train/optimizer.h"

#include <cmath>

namespace ms::train {

struct Optimizer::Coefficients {
  float lr;
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float inv_bias1;       // 1 / (1 - beta1^t)
  float inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float weight_decay;
};

Result<std::unique_ptr<Optimizer>> Optimizer::create(const config::OptimConfig& optim,
                                                     int64_t numel, size_t num_params) {
  if (optim.betas.size() != 2) {
    return InvalidArgument("optim.betas must hold exactly two values [beta1, beta2], got " +
                           std::to_string(optim.betas.size()));
  }
  return std::unique_ptr<Optimizer>(new Optimizer(optim, numel, num_params));
}

Optimizer::Optimizer(const config::OptimConfig& optim, int64_t numel, size_t num_params)
    : kind_(optim.name),
      beta1_(optim.betas[0]),
      beta2_(optim.betas[1]),
      eps_(optim.eps),
      weight_decay_(optim.weight_decay),
      num_params_(num_params),
      exp_avg_(static_cast<size_t>(numel), 0.0f),
      exp_avg_sq_(static_cast<size_t>(numel), 0.0f) {}

Optimizer::Coefficients Optimizer::coefficients(const OptimStep& hyper) const {
  const double t = static_cast<double>(updates_ + 1);
  Coefficients c;
  c.lr = static_cast<float>(hyper.lr);
  c.grad_scale = static_cast<float>(hyper.grad_scale);
  c.beta1 = static_cast<float>(beta1_);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1_);
  c.beta2 = static_cast<float>(beta2_);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2_);
  c.inv_bias1 = static_cast<float>(1.0 / (1.0 - std::pow(beta1_, t)));
  c.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2_, t)));
  c.eps = static_cast<float>(eps_);
  c.weight_decay = static_cast<float>(weight_decay_);
  return c;
}

Status Optimizer::step(std::span<float> values, std::span<const float> grads,
                       std::span<const OptimSegment> segments, const OptimStep& hyper,
                       const PartialSumReducer& reduce) {
  const Coefficients c = coefficients(hyper);
  if (kind_ == config::OptimizerKind::kLamb) {
    MS_RETURN_IF_ERROR(lamb_step(c, values, grads, segments, reduce));
  } else {
    for (const OptimSegment& seg : segments) {
      adamw_segment(c, seg, values.data() + seg.offset, grads.data() + seg.offset);
    }
  }
  ++updates_;
  return Status::OK();
}

void Optimizer::adamw_segment(const Coefficients& c, const OptimSegment& seg, float* w,
                              const float* g) {
  float* m = exp_avg_.data() + seg.offset;
  float* v = exp_avg_sq_.data() + seg.offset;
  const float decay = seg.weight_decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
  const float step_size = c.lr * c.inv_bias1;
  for (int64_t i = 0; i < seg.length; ++i) {
    const float grad = g[i] * c.grad_scale;
    m[i] = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    v[i] = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
    const float denom = std::sqrt(v[i]) * c.inv_sqrt_bias2 + c.eps;
    w[i] = w[i] * decay - step_size * (m[i] / denom);
  }
}

void Optimizer::lamb_direction(const Coefficients& c, const OptimSegment& seg, const float* w,
                               const float* g, std::span<double> sums) {
  float* m = exp_avg_.data() + seg.offset;
  float* v = exp_avg_sq_.data() + seg.offset;
  float* d = direction_.data() + seg.offset;
  const float decay = seg.weight_decay ? c.weight_decay : 0.0f;
  double w_sq = 0, d_sq = 0;
  for (int64_t i = 0; i < seg.length; ++i) {
    const float grad = g[i] * c.grad_scale;
    m[i] = c.beta1 * m[i] + c.one_minus_beta1 * grad;
    v[i] = c.beta2 * v[i] + c.one_minus_beta2 * grad * grad;
    const float adam = (m[i] * c.inv_bias1) / (std::sqrt(v[i]) * c.inv_sqrt_bias2 + c.eps);
    d[i] = adam + decay * w[i];
    w_sq += static_cast<double>(w[i]) * w[i];
    d_sq += static_cast<double>(d[i]) * d[i];
  }
  sums[2 * seg.param] += w_sq;
  sums[2 * seg.param + 1] += d_sq;
}

Status Optimizer::lamb_step(const Coefficients& c, std::span<float> values,
                            std::span<const float> grads, std::span<const OptimSegment> segments,
                            const PartialSumReducer& reduce) {
  direction_.resize(exp_avg_.size());
  std::vector<double> sums(2 * num_params_, 0.0);
  for (const OptimSegment& seg : segments) {
    lamb_direction(c, seg, values.data() + seg.offset, grads.data() + seg.offset, sums);
  }
  MS_RETURN_IF_ERROR(reduce(sums));
  for (const OptimSegment& seg : segments) {
    const double w_norm = std::sqrt(sums[2 * seg.param]);
    const double d_norm = std::sqrt(sums[2 * seg.param + 1]);
    const bool adapt = seg.weight_decay && w_norm > 0 && d_norm > 0;
    const float step = c.lr * static_cast<float>(adapt ? w_norm / d_norm : 1.0);
    float* w = values.data() + seg.offset;
    const float* d = direction_.data() + seg.offset;
    for (int64_t i = 0; i < seg.length; ++i) w[i] -= step * d[i];
  }
  return Status::OK();
}

}  // namespace ms::train
