// The pipeline placement rule by tensor name (pp_placement.h).
#include "parallel/pp_placement.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "parallel/pp_stages.h"

namespace ms::parallel {
namespace {

constexpr std::string_view kLayersPrefix = "model.layers.";

// "optimizer.exp_avg.model.x" -> "model.x": optimizer state follows its parameter. A name
// "optimizer.<moment>" without a parameter gives "", which no rule matches.
std::string_view parameter_of(std::string_view name) {
  constexpr std::string_view kOptimizer = "optimizer.";
  if (!name.starts_with(kOptimizer)) return name;
  name.remove_prefix(kOptimizer.size());
  const size_t dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(dot + 1);
}

// L of "model.layers.L.<rest>" (rest not empty), or -1 when `name` does not have that form.
int64_t layer_index(std::string_view name) {
  if (!name.starts_with(kLayersPrefix)) return -1;
  name.remove_prefix(kLayersPrefix.size());
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string_view::npos || dot + 1 == name.size()) return -1;
  int64_t layer = -1;
  auto [end, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || end != name.data() + dot) return -1;
  return layer;
}

Status unknown_name(std::string_view name) {
  return InvalidArgument("tensor \"" + std::string(name) + "\": no pipeline stage holds it (the "
                         "rule knows model.embed_tokens.weight, model.layers.<L>.*, "
                         "model.norm.weight, lm_head.weight and optimizer.<moment>.<those>)");
}

// The stage whose layers hold `layer`.
Result<int> stage_of_layer(std::string_view name, int64_t layer,
                           const std::vector<StageLayers>& stages, int64_t n_layers) {
  for (size_t s = 0; s < stages.size(); ++s) {
    if (layer >= stages[s].first && layer < stages[s].first + stages[s].count) {
      return static_cast<int>(s);
    }
  }
  return InvalidArgument("tensor \"" + std::string(name) + "\": layer " + std::to_string(layer) +
                         " is out of range for model.n_layers " + std::to_string(n_layers));
}

}  // namespace

Result<std::vector<int>> pp_stages_holding(std::string_view name, int64_t n_layers,
                                           bool tie_embeddings, int pp, int vpp,
                                           const std::vector<int64_t>& explicit_counts) {
  MS_ASSIGN_OR_RETURN(const std::vector<StageLayers> stages,
                      pp_stage_layers(n_layers, pp, vpp, explicit_counts));
  const int last = static_cast<int>(stages.size()) - 1;
  const std::string_view param = parameter_of(name);
  if (param == "model.embed_tokens.weight") {
    if (tie_embeddings && last != 0) return std::vector<int>{0, last};
    return std::vector<int>{0};
  }
  if (param == "model.norm.weight" || param == "lm_head.weight") return std::vector<int>{last};
  const int64_t layer = layer_index(param);
  if (layer < 0) return unknown_name(name);
  MS_ASSIGN_OR_RETURN(const int stage, stage_of_layer(name, layer, stages, n_layers));
  return std::vector<int>{stage};
}

Result<std::vector<int>> pp_ranks_holding(std::string_view name, int64_t n_layers,
                                          bool tie_embeddings, int pp, int vpp,
                                          const std::vector<int64_t>& explicit_counts) {
  MS_ASSIGN_OR_RETURN(std::vector<int> ranks,
                      pp_stages_holding(name, n_layers, tie_embeddings, pp, vpp, explicit_counts));
  for (int& s : ranks) s %= pp;
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

}  // namespace ms::parallel
