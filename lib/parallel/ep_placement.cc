// The expert-parallel placement rule by tensor name (ep_placement.h).
#include "parallel/ep_placement.h"

#include <cassert>
#include <charconv>
#include <string>

namespace ms::parallel {
namespace {

constexpr std::string_view kExperts = ".block_sparse_moe.experts.";

// "optimizer.exp_avg.model.x" -> "model.x": optimizer state follows its parameter.
std::string_view parameter_of(std::string_view name) {
  constexpr std::string_view kOptimizer = "optimizer.";
  if (!name.starts_with(kOptimizer)) return name;
  name.remove_prefix(kOptimizer.size());
  const size_t dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
}

// A whole non-negative decimal number, or -1.
int64_t whole_number(std::string_view text) {
  int64_t v = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0) return -1;
  return v;
}

// X of "model.layers.<L>.block_sparse_moe.experts.<X>.{w1,w2,w3}.weight", or -1 when `param`
// does not have exactly that form.
int64_t expert_index(std::string_view param, size_t experts_at) {
  constexpr std::string_view kLayers = "model.layers.";
  if (!param.starts_with(kLayers) || experts_at < kLayers.size()) return -1;
  if (whole_number(param.substr(kLayers.size(), experts_at - kLayers.size())) < 0) return -1;
  std::string_view rest = param.substr(experts_at + kExperts.size());
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return -1;
  const std::string_view weight = rest.substr(dot + 1);
  if (weight != "w1.weight" && weight != "w2.weight" && weight != "w3.weight") return -1;
  return whole_number(rest.substr(0, dot));
}

}  // namespace

bool ep_divides_experts(int64_t num_experts, int ep) {
  return ep >= 1 && num_experts >= 1 && num_experts % ep == 0;
}

ExpertRange ep_local_experts(int64_t num_experts, int ep, int rank) {
  assert(ep_divides_experts(num_experts, ep) && rank >= 0 && rank < ep);
  const int64_t count = num_experts / ep;
  return {rank * count, count};
}

Result<std::optional<int>> ep_rank_holding(std::string_view name, int64_t num_experts, int ep) {
  if (!ep_divides_experts(num_experts, ep)) {
    return InvalidArgument("model.moe.num_experts " + std::to_string(num_experts) +
                           " is not a positive multiple of ep " + std::to_string(ep) +
                           ", so experts cannot be divided among the ep ranks");
  }
  const std::string_view param = parameter_of(name);
  const size_t experts_at = param.find(kExperts);
  if (experts_at == std::string_view::npos) return std::optional<int>();
  const int64_t expert = expert_index(param, experts_at);
  if (expert < 0) {
    return InvalidArgument("tensor \"" + std::string(name) + "\": not an expert name (expected "
                           "model.layers.<L>.block_sparse_moe.experts.<X>.{w1,w2,w3}.weight)");
  }
  if (expert >= num_experts) {
    return InvalidArgument("tensor \"" + std::string(name) + "\": expert " +
                           std::to_string(expert) + " is out of range for model.moe.num_experts " +
                           std::to_string(num_experts));
  }
  // The rank whose range ep_local_experts gives contains `expert`.
  return std::optional<int>(static_cast<int>(expert / ep_local_experts(num_experts, ep, 0).count));
}

}  // namespace ms::parallel
