// The actor's and critic's losses, each returned with its gradient with respect to the tokens'
// log-probabilities (or the critic's values), so the trainer backpropagates it through the
// model's log-softmax. Every loss is aggregated per token with the weights of aggregation.h.
//
//   clipped_policy_loss  PPO's clipped ratio with separate clip_low / clip_high (DAPO's
//                        clip-higher: 0.2 / 0.28) and the dual clip (ratio bound c = 3 on
//                        negative advantages, verl's clip_ratio_c); the log ratio is clamped to
//                        [-20, 20] before exp, as verl does.
//   k3_kl_loss           coef * k3(ref || pi) with verl's low_var_kl: kl = clamp(ref - logp,
//                        -20, 20), k3 = exp(kl) - kl - 1 clamped to [-10, 10].
//   value_loss           0.5 * max((v - R)^2, (clip(v, v_old - c, v_old + c) - R)^2) (verl).
//   positive_nll_loss    VAPO's coef * NLL over the tokens of correct responses (token mean).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "rl/aggregation.h"
#include "rl/response_layout.h"

namespace ms::rl {

struct LossResult {
  double loss = 0.0;
  // d loss / d input per token (the log-probs; the values for value_loss).
  std::vector<double> gradient;
  // Fraction of tokens where clipping changed the loss (policy: the ratio clip; value: the
  // value clip); 0 for losses without a clip.
  double clip_fraction = 0.0;
  // Fraction of tokens where the dual clip bound the loss of a negative advantage.
  double dual_clip_fraction = 0.0;
  // Mean over tokens: the policy's approximate KL to the rollout policy (mean of
  // old_logp - logp) for the policy loss; the mean k3 for the KL loss.
  double kl = 0.0;
};

struct PolicyClip {
  double low = 0.2;   // ratio floor 1 - low
  double high = 0.2;  // ratio ceiling 1 + high (DAPO: 0.28)
  // Bound c on -A * ratio for negative advantages; 0 turns the dual clip off, else > 1.
  double dual = 3.0;
};

Result<LossResult> clipped_policy_loss(const ResponseLayout& layout,
                                       std::span<const double> log_probs,
                                       std::span<const double> old_log_probs,
                                       std::span<const double> advantages, const PolicyClip& clip,
                                       const AggregationScope& scope);

Result<LossResult> k3_kl_loss(const ResponseLayout& layout, std::span<const double> log_probs,
                              std::span<const double> ref_log_probs, double coef,
                              const AggregationScope& scope);

// values: the critic's predictions being trained; old_values: its predictions at rollout time.
Result<LossResult> value_loss(const ResponseLayout& layout, std::span<const double> values,
                              std::span<const double> old_values,
                              std::span<const double> returns, double clip_range,
                              const AggregationScope& scope);

// positive: one flag per response (1 when its reward marks it correct). Token mean over the
// positive responses' tokens; global_positive_tokens counts them over every data-parallel rank
// (0: this batch's count), data_parallel_size as in AggregationScope.
Result<LossResult> positive_nll_loss(const ResponseLayout& layout,
                                     std::span<const double> log_probs,
                                     std::span<const double> positive, double coef,
                                     int64_t global_positive_tokens = 0,
                                     int data_parallel_size = 1);

}  // namespace ms::rl
