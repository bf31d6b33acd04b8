// The optimizer's state and per-step scalars; the element loops are ops/optimizer.h's, on the
// backend. The per-step scalars are computed once in double and rounded to fp32; LAMB's
// per-parameter norms are summed in double over the segments (and ranks) of a parameter.
#include "train/optimizer.h"

#include <cmath>

namespace ms::train {

Result<std::unique_ptr<Optimizer>> Optimizer::create(const config::OptimConfig& optim,
                                                     int64_t numel, size_t num_params,
                                                     ops::Backend* backend) {
  if (optim.betas.size() != 2) {
    return InvalidArgument("optim.betas must hold exactly two values [beta1, beta2], got " +
                           std::to_string(optim.betas.size()));
  }
  return std::unique_ptr<Optimizer>(new Optimizer(optim, numel, num_params, backend));
}

Optimizer::Optimizer(const config::OptimConfig& optim, int64_t numel, size_t num_params,
                     ops::Backend* backend)
    : be_(backend),
      kind_(optim.name),
      beta1_(optim.betas[0]),
      beta2_(optim.betas[1]),
      eps_(optim.eps),
      weight_decay_(optim.weight_decay),
      num_params_(num_params) {
  exp_avg_.zeroed(*be_, static_cast<size_t>(numel));
  exp_avg_sq_.zeroed(*be_, static_cast<size_t>(numel));
}

ops::AdamCoefficients Optimizer::coefficients(const OptimStep& hyper) const {
  const double t = static_cast<double>(updates_ + 1);
  ops::AdamCoefficients c;
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
  const ops::AdamCoefficients c = coefficients(hyper);
  if (kind_ == config::OptimizerKind::kLamb) {
    MS_RETURN_IF_ERROR(lamb_step(c, values, grads, segments, reduce));
  } else {
    for (const OptimSegment& seg : segments) {
      be_->adamw_update(c, seg.weight_decay, values.data() + seg.offset,
                        grads.data() + seg.offset, exp_avg_.data() + seg.offset,
                        exp_avg_sq_.data() + seg.offset, seg.length);
    }
  }
  ++updates_;
  return Status::OK();
}

// Each segment's moments and direction (into direction_), with its ||w||^2 and ||direction||^2
// added to sums[2 * param] and sums[2 * param + 1]; the sums over every rank holding part of a
// parameter give its trust ratio; then each segment steps by lr times that ratio.
Status Optimizer::lamb_step(const ops::AdamCoefficients& c, std::span<float> values,
                            std::span<const float> grads, std::span<const OptimSegment> segments,
                            const PartialSumReducer& reduce) {
  direction_.resize(*be_, exp_avg_.size());
  std::vector<double> sums(2 * num_params_, 0.0);
  for (const OptimSegment& seg : segments) {
    double norms[2];
    be_->lamb_direction(c, seg.weight_decay, values.data() + seg.offset,
                        grads.data() + seg.offset, exp_avg_.data() + seg.offset,
                        exp_avg_sq_.data() + seg.offset, direction_.data() + seg.offset, norms,
                        seg.length);
    sums[2 * seg.param] += norms[0];
    sums[2 * seg.param + 1] += norms[1];
  }
  MS_RETURN_IF_ERROR(reduce(sums));
  for (const OptimSegment& seg : segments) {
    const double w_norm = std::sqrt(sums[2 * seg.param]);
    const double d_norm = std::sqrt(sums[2 * seg.param + 1]);
    const bool adapt = seg.weight_decay && w_norm > 0 && d_norm > 0;
    const float step = c.lr * static_cast<float>(adapt ? w_norm / d_norm : 1.0);
    be_->lamb_update(step, direction_.data() + seg.offset, values.data() + seg.offset,
                     seg.length);
  }
  return Status::OK();
}

}  // namespace ms::train
