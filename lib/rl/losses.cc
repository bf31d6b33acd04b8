#include "rl/losses.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ms::rl {
namespace {

constexpr double kLogRatioBound = 20.0;  // verl clamps log ratios before exp
constexpr double kK3Bound = 10.0;        // and the k3 estimate after

double mean_over(int64_t count, double sum) {
  return count > 0 ? sum / static_cast<double>(count) : 0.0;
}

}  // namespace

Result<LossResult> clipped_policy_loss(const ResponseLayout& layout,
                                       std::span<const double> log_probs,
                                       std::span<const double> old_log_probs,
                                       std::span<const double> advantages, const PolicyClip& clip,
                                       const AggregationScope& scope) {
  MS_RETURN_IF_ERROR(layout.check_tokens(log_probs, "log-probs"));
  MS_RETURN_IF_ERROR(layout.check_tokens(old_log_probs, "old log-probs"));
  MS_RETURN_IF_ERROR(layout.check_tokens(advantages, "advantages"));
  if (clip.low < 0.0 || clip.low >= 1.0 || clip.high < 0.0) {
    return InvalidArgument("policy clip range must have 0 <= clip_low < 1 and clip_high >= 0");
  }
  if (clip.dual != 0.0 && clip.dual <= 1.0) {
    return InvalidArgument("the dual-clip bound must exceed 1 (or be 0 to turn it off), got " +
                           std::to_string(clip.dual));
  }
  MS_ASSIGN_OR_RETURN(std::vector<double> weights, aggregation_weights(layout, scope));
  LossResult out;
  out.gradient.assign(log_probs.size(), 0.0);
  int64_t clipped = 0;
  int64_t dual_clipped = 0;
  double kl_sum = 0.0;
  for (size_t k = 0; k < log_probs.size(); ++k) {
    const double raw = log_probs[k] - old_log_probs[k];
    const double log_ratio = std::clamp(raw, -kLogRatioBound, kLogRatioBound);
    const bool ratio_moves = raw == log_ratio;  // the clamp passes the gradient through
    const double ratio = std::exp(log_ratio);
    const double d_ratio = ratio_moves ? ratio : 0.0;
    kl_sum += -log_ratio;
    const double a = advantages[k];
    const double bounded = std::clamp(ratio, 1.0 - clip.low, 1.0 + clip.high);
    const double unclipped_loss = -a * ratio;
    const double clipped_loss = -a * bounded;
    // max(-A r, -A clip(r)): the pessimistic of the two.
    double loss = unclipped_loss;
    double grad = -a * d_ratio;
    if (clipped_loss > unclipped_loss) {
      ++clipped;
      loss = clipped_loss;
      grad = bounded == ratio ? -a * d_ratio : 0.0;
    }
    if (clip.dual != 0.0 && a < 0.0) {
      const double dual_loss = -a * clip.dual;
      if (loss > dual_loss) {
        ++dual_clipped;
        loss = dual_loss;
        grad = 0.0;
      }
    }
    out.loss += weights[k] * loss;
    out.gradient[k] = weights[k] * grad;
  }
  const auto n = static_cast<int64_t>(log_probs.size());
  out.clip_fraction = mean_over(n, static_cast<double>(clipped));
  out.dual_clip_fraction = mean_over(n, static_cast<double>(dual_clipped));
  out.kl = mean_over(n, kl_sum);
  return out;
}

Result<LossResult> k3_kl_loss(const ResponseLayout& layout, std::span<const double> log_probs,
                              std::span<const double> ref_log_probs, double coef,
                              const AggregationScope& scope) {
  MS_RETURN_IF_ERROR(layout.check_tokens(log_probs, "log-probs"));
  MS_RETURN_IF_ERROR(layout.check_tokens(ref_log_probs, "reference log-probs"));
  MS_ASSIGN_OR_RETURN(std::vector<double> weights, aggregation_weights(layout, scope));
  LossResult out;
  out.gradient.assign(log_probs.size(), 0.0);
  double k3_sum = 0.0;
  for (size_t k = 0; k < log_probs.size(); ++k) {
    const double raw = ref_log_probs[k] - log_probs[k];
    const double kl = std::clamp(raw, -kLogRatioBound, kLogRatioBound);
    const double k3_raw = std::exp(kl) - kl - 1.0;
    const double k3 = std::clamp(k3_raw, -kK3Bound, kK3Bound);
    // d k3 / d logp = (exp(kl) - 1) * d kl / d logp = 1 - exp(kl), where neither clamp binds.
    const bool passes = raw == kl && k3_raw == k3;
    k3_sum += k3;
    out.loss += coef * weights[k] * k3;
    out.gradient[k] = passes ? coef * weights[k] * (1.0 - std::exp(kl)) : 0.0;
  }
  out.kl = mean_over(static_cast<int64_t>(log_probs.size()), k3_sum);
  return out;
}

Result<LossResult> value_loss(const ResponseLayout& layout, std::span<const double> values,
                              std::span<const double> old_values,
                              std::span<const double> returns, double clip_range,
                              const AggregationScope& scope) {
  MS_RETURN_IF_ERROR(layout.check_tokens(values, "values"));
  MS_RETURN_IF_ERROR(layout.check_tokens(old_values, "old values"));
  MS_RETURN_IF_ERROR(layout.check_tokens(returns, "returns"));
  if (clip_range < 0.0) {
    return InvalidArgument("value clip range must be >= 0, got " + std::to_string(clip_range));
  }
  MS_ASSIGN_OR_RETURN(std::vector<double> weights, aggregation_weights(layout, scope));
  LossResult out;
  out.gradient.assign(values.size(), 0.0);
  int64_t clipped = 0;
  for (size_t k = 0; k < values.size(); ++k) {
    const double v = values[k];
    const double bounded = std::clamp(v, old_values[k] - clip_range, old_values[k] + clip_range);
    const double plain = (v - returns[k]) * (v - returns[k]);
    const double held = (bounded - returns[k]) * (bounded - returns[k]);
    double loss = plain;
    double grad = 2.0 * (v - returns[k]);
    if (held > plain) {
      ++clipped;
      loss = held;
      grad = bounded == v ? 2.0 * (bounded - returns[k]) : 0.0;
    }
    out.loss += 0.5 * weights[k] * loss;
    out.gradient[k] = 0.5 * weights[k] * grad;
  }
  out.clip_fraction = mean_over(static_cast<int64_t>(values.size()), static_cast<double>(clipped));
  return out;
}

Result<LossResult> positive_nll_loss(const ResponseLayout& layout,
                                     std::span<const double> log_probs,
                                     std::span<const double> positive, double coef,
                                     int64_t global_positive_tokens, int data_parallel_size) {
  MS_RETURN_IF_ERROR(layout.check_tokens(log_probs, "log-probs"));
  MS_RETURN_IF_ERROR(layout.check_responses(positive, "positive flags"));
  if (data_parallel_size < 1) return InvalidArgument("data-parallel size must be at least 1");
  int64_t tokens = global_positive_tokens;
  if (tokens == 0) {
    for (int64_t i = 0; i < layout.num_responses(); ++i) {
      if (positive[static_cast<size_t>(i)] > 0.0) tokens += layout.length(i);
    }
  }
  LossResult out;
  out.gradient.assign(log_probs.size(), 0.0);
  if (tokens == 0) return out;
  const double weight = coef * data_parallel_size / static_cast<double>(tokens);
  for (int64_t i = 0; i < layout.num_responses(); ++i) {
    if (!(positive[static_cast<size_t>(i)] > 0.0)) continue;
    for (int64_t t = layout.begin(i); t < layout.end(i); ++t) {
      out.loss -= weight * log_probs[static_cast<size_t>(t)];
      out.gradient[static_cast<size_t>(t)] = -weight;
    }
  }
  return out;
}

}  // namespace ms::rl
