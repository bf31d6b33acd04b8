// Advantage estimators (the `rl.algorithm` key picks which the loop uses):
//   GRPO (and DAPO): one scalar reward per response, normalised within its group of G responses
//     to the same prompt: (r - mean) / (std + eps), std the sample (n - 1) standard deviation,
//     eps 1e-6 (verl's constants); a group of one response gets advantage r (mean 0, std 1).
//   GAE: per-token rewards and values, delta_t = r_t + gamma V_{t+1} - V_t,
//     A_t = delta_t + gamma lambda A_{t+1}, returns = A + V (verl's recursion). VAPO decouples
//     lambda: the critic's returns use lambda 1.0 (unbiased Monte-Carlo targets), the policy's
//     advantages a length-adaptive lambda = 1 - 1 / (alpha * length), alpha 0.05.
//   Monte-Carlo returns: G_t = sum_{k >= t} gamma^(k-t) r_k, the targets of value pretraining.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "rl/response_layout.h"

namespace ms::rl {

struct GroupNormalization {
  double epsilon = 1e-6;
  // false: subtract the group mean only (Dr. GRPO).
  bool scale_by_std = true;
};

// scores: one reward per response, groups of `group_size` consecutive responses. Returns one
// advantage per response. InvalidArgument when the count is not a multiple of group_size.
Result<std::vector<double>> group_normalized_advantages(std::span<const double> scores,
                                                        int64_t group_size,
                                                        const GroupNormalization& options = {});

// Spreads one value per response over its tokens (how an outcome advantage reaches the loss).
Result<std::vector<double>> broadcast_to_tokens(const ResponseLayout& layout,
                                                std::span<const double> per_response);

struct AdvantagesAndReturns {
  std::vector<double> advantages;  // per token
  std::vector<double> returns;     // per token: advantages + values, the critic's targets
};

// GAE over each response with its own lambda (lambdas: one per response). The advantages are
// not whitened here; whiten_tokens does that as verl does after GAE.
Result<AdvantagesAndReturns> gae(const ResponseLayout& layout, std::span<const double> rewards,
                                 std::span<const double> values, double gamma,
                                 std::span<const double> lambdas);

// VAPO's decoupled GAE: returns from lambda = critic_lambda (1.0 in VAPO), advantages from
// each response's policy lambda.
Result<AdvantagesAndReturns> decoupled_gae(const ResponseLayout& layout,
                                           std::span<const double> rewards,
                                           std::span<const double> values, double gamma,
                                           double critic_lambda,
                                           std::span<const double> policy_lambdas);

// VAPO's length-adaptive policy lambda, 1 - 1 / (alpha * length), clamped to [0, 1]: a response
// shorter than 1 / alpha tokens would get a negative lambda, so it gets 0 (one-step TD).
double length_adaptive_lambda(int64_t length, double alpha = 0.05);

// G_t = sum_{k >= t} gamma^(k-t) r_k within each response.
Result<std::vector<double>> monte_carlo_returns(const ResponseLayout& layout,
                                                std::span<const double> rewards, double gamma);

// (x - mean) / sqrt(var + 1e-8) over all tokens, var the unbiased (n - 1) variance, as verl's
// masked_whiten. InvalidArgument for fewer than two tokens.
Result<std::vector<double>> whiten_tokens(std::span<const double> values);
// The same with the mean and the unbiased variance given (the loop takes them over every
// data-parallel rank's tokens, so dp ranks whiten as one rank would the union batch).
std::vector<double> whiten_with(std::span<const double> values, double mean, double variance);

}  // namespace ms::rl
