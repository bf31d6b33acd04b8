#include "rl/advantage.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace ms::rl {

Result<std::vector<double>> group_normalized_advantages(std::span<const double> scores,
                                                        int64_t group_size,
                                                        const GroupNormalization& options) {
  if (group_size < 1 || scores.size() % static_cast<size_t>(group_size) != 0) {
    return InvalidArgument(std::to_string(scores.size()) +
                           " rewards do not split into groups of " + std::to_string(group_size));
  }
  std::vector<double> advantages(scores.size());
  const size_t g = static_cast<size_t>(group_size);
  for (size_t start = 0; start < scores.size(); start += g) {
    double mean = 0.0;
    double std_dev = 1.0;
    if (g > 1) {
      for (size_t i = start; i < start + g; ++i) mean += scores[i];
      mean /= static_cast<double>(g);
      double squares = 0.0;
      for (size_t i = start; i < start + g; ++i) squares += (scores[i] - mean) * (scores[i] - mean);
      std_dev = std::sqrt(squares / static_cast<double>(g - 1));
    }
    for (size_t i = start; i < start + g; ++i) {
      advantages[i] = options.scale_by_std ? (scores[i] - mean) / (std_dev + options.epsilon)
                                           : scores[i] - mean;
    }
  }
  return advantages;
}

Result<std::vector<double>> broadcast_to_tokens(const ResponseLayout& layout,
                                                std::span<const double> per_response) {
  MS_RETURN_IF_ERROR(layout.check_responses(per_response, "per-response values"));
  std::vector<double> tokens(static_cast<size_t>(layout.num_tokens()));
  for (int64_t i = 0; i < layout.num_responses(); ++i) {
    std::fill(tokens.begin() + layout.begin(i), tokens.begin() + layout.end(i),
              per_response[static_cast<size_t>(i)]);
  }
  return tokens;
}

Result<AdvantagesAndReturns> gae(const ResponseLayout& layout, std::span<const double> rewards,
                                 std::span<const double> values, double gamma,
                                 std::span<const double> lambdas) {
  MS_RETURN_IF_ERROR(layout.check_tokens(rewards, "rewards"));
  MS_RETURN_IF_ERROR(layout.check_tokens(values, "values"));
  MS_RETURN_IF_ERROR(layout.check_responses(lambdas, "lambdas"));
  AdvantagesAndReturns out;
  out.advantages.resize(rewards.size());
  out.returns.resize(rewards.size());
  for (int64_t i = 0; i < layout.num_responses(); ++i) {
    const double lambda = lambdas[static_cast<size_t>(i)];
    double next_value = 0.0;  // past the last token the episode has ended
    double next_advantage = 0.0;
    for (int64_t t = layout.end(i) - 1; t >= layout.begin(i); --t) {
      const auto k = static_cast<size_t>(t);
      const double delta = rewards[k] + gamma * next_value - values[k];
      next_advantage = delta + gamma * lambda * next_advantage;
      next_value = values[k];
      out.advantages[k] = next_advantage;
      out.returns[k] = next_advantage + values[k];
    }
  }
  return out;
}

Result<AdvantagesAndReturns> decoupled_gae(const ResponseLayout& layout,
                                           std::span<const double> rewards,
                                           std::span<const double> values, double gamma,
                                           double critic_lambda,
                                           std::span<const double> policy_lambdas) {
  const std::vector<double> critic_lambdas(static_cast<size_t>(layout.num_responses()),
                                           critic_lambda);
  MS_ASSIGN_OR_RETURN(AdvantagesAndReturns critic,
                      gae(layout, rewards, values, gamma, critic_lambdas));
  MS_ASSIGN_OR_RETURN(AdvantagesAndReturns policy,
                      gae(layout, rewards, values, gamma, policy_lambdas));
  return AdvantagesAndReturns{std::move(policy.advantages), std::move(critic.returns)};
}

double length_adaptive_lambda(int64_t length, double alpha) {
  if (length <= 0 || alpha <= 0.0) return 0.0;
  return std::clamp(1.0 - 1.0 / (alpha * static_cast<double>(length)), 0.0, 1.0);
}

Result<std::vector<double>> monte_carlo_returns(const ResponseLayout& layout,
                                                std::span<const double> rewards, double gamma) {
  MS_RETURN_IF_ERROR(layout.check_tokens(rewards, "rewards"));
  std::vector<double> returns(rewards.size());
  for (int64_t i = 0; i < layout.num_responses(); ++i) {
    double running = 0.0;
    for (int64_t t = layout.end(i) - 1; t >= layout.begin(i); --t) {
      running = rewards[static_cast<size_t>(t)] + gamma * running;
      returns[static_cast<size_t>(t)] = running;
    }
  }
  return returns;
}

Result<std::vector<double>> whiten_tokens(std::span<const double> values) {
  if (values.size() < 2) {
    return InvalidArgument("whitening needs at least two tokens, got " +
                           std::to_string(values.size()));
  }
  const double n = static_cast<double>(values.size());
  double mean = 0.0;
  for (double v : values) mean += v;
  mean /= n;
  double squares = 0.0;
  for (double v : values) squares += (v - mean) * (v - mean);
  return whiten_with(values, mean, squares / n * (n / (n - 1.0)));
}

std::vector<double> whiten_with(std::span<const double> values, double mean, double variance) {
  const double scale = 1.0 / std::sqrt(variance + 1e-8);
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = (values[i] - mean) * scale;
  return out;
}

}  // namespace ms::rl
