// The layout search; see search.h.
#include "plan/search.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <tuple>

#include "parallel/ep_placement.h"
#include "parallel/tp_layout.h"

namespace ms::plan {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(d);
  }
  return out;
}

// The schedules (with their vpp) a pipeline of pp ranks can run the model's layers with, each
// with the layer splits planned for it (layout.h's planned_pp_splits: uneven where the stages
// do not divide the layers, as the trainer runs them with parallel.pp_layers).
struct PipelineChoice {
  std::string schedule;
  int vpp = 1;
  std::vector<int64_t> pp_layers;
};

std::vector<PipelineChoice> pipelines(int pp, int64_t n_layers) {
  if (pp == 1) return {{"1f1b", 1, {}}};
  std::vector<PipelineChoice> out;
  for (const char* schedule : {"1f1b", "zero-bubble"}) {
    for (auto& split : planned_pp_splits(n_layers, pp, 1)) out.push_back({schedule, 1, split});
  }
  for (int vpp = 2; vpp <= 8 && pp * vpp <= n_layers; ++vpp) {
    for (auto& split : planned_pp_splits(n_layers, pp, vpp)) {
      out.push_back({"interleaved", vpp, split});
    }
  }
  return out;
}

constexpr config::Recompute kRecompute[] = {
    config::Recompute::kNone, config::Recompute::kSelective, config::Recompute::kFull};

int ranks_on_node(const Cluster& cluster, int world) {
  return std::min(world, cluster.ranks_per_node);
}

}  // namespace

std::vector<Layout> candidate_layouts(const config::RunConfig& config, int world) {
  const config::ModelConfig& m = config.model;
  std::vector<Layout> out;
  for (int64_t tp : divisors(world)) {
    if (!parallel::check_tp_model({m.n_heads, m.n_kv_heads, m.d_ff, m.moe.shared_expert_d_ff},
                                  static_cast<int>(tp))
             .ok()) {
      continue;
    }
    const std::vector<bool> sp_values =
        tp > 1 ? std::vector<bool>{true, false} : std::vector<bool>{true};
    for (int64_t pp : divisors(world / tp)) {
      if (pp > m.n_layers) continue;
      // Context parallelism cuts each sequence into 2 cp chunks, and is refused with a capacity
      // factor (check_layout refuses both; this only skips the loops below).
      for (int64_t cp : divisors(world / (tp * pp))) {
        if (cp > 1 && (config.train.seq_len % (2 * cp) != 0 || m.moe.capacity_factor > 0)) {
          continue;
        }
        const int64_t dp = world / (tp * pp * cp);
        if (config.train.global_batch % dp != 0) continue;
        for (int64_t ep : divisors(dp * cp)) {
          if (ep > 1 && !parallel::ep_divides_experts(m.moe.num_experts, ep)) continue;
          for (const PipelineChoice& pipe : pipelines(static_cast<int>(pp), m.n_layers)) {
            for (int64_t mb : divisors(config.train.global_batch / dp)) {
              for (bool zero : {true, false}) {
                for (config::Recompute rc : kRecompute) {
                  for (bool sp : sp_values) {
                    Layout l{.dp = static_cast<int>(dp),
                             .tp = static_cast<int>(tp),
                             .pp = static_cast<int>(pp),
                             .vpp = pipe.vpp,
                             .ep = static_cast<int>(ep),
                             .cp = static_cast<int>(cp),
                             .schedule = pipe.schedule,
                             .micro_batch = mb,
                             .zero = zero,
                             .recompute = rc,
                             .sequence_parallel = sp,
                             .pp_layers = pipe.pp_layers};
                    if (check_layout(config, l, world).ok()) out.push_back(l);
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return out;
}

Result<Prediction> predict_layout(const Cluster& cluster, const config::RunConfig& config,
                                  const Layout& layout, int world, Scaling scaling) {
  MS_RETURN_IF_ERROR(check_model_fits_planner(config));
  MS_RETURN_IF_ERROR(check_layout(config, layout, world));
  const CostModel model(cluster, ranks_on_node(cluster, world), scaling);
  MS_ASSIGN_OR_RETURN(const std::vector<RankElements> elements, rank_elements(config, layout));
  return predict(model, config, layout, elements, world);
}

Result<SearchResult> search_layouts(const Cluster& cluster, const config::RunConfig& config,
                                    int world, Scaling scaling, size_t keep) {
  MS_RETURN_IF_ERROR(check_model_fits_planner(config));
  const CostModel model(cluster, ranks_on_node(cluster, world), scaling);
  const double limit_mib = cluster.memory_per_rank_gib * 1024.0;
  SearchResult result;
  result.world = world;
  // Parameters per rank depend on tp, pp, vpp, ep and the layer split, not on dp or cp.
  std::map<std::tuple<int, int, int, int, std::vector<int64_t>>, std::vector<RankElements>>
      elements;
  double smallest_peak = -1;
  for (const Layout& l : candidate_layouts(config, world)) {
    ++result.considered;
    auto key = std::make_tuple(l.tp, l.pp, l.vpp, l.ep, l.pp_layers);
    auto it = elements.find(key);
    if (it == elements.end()) {
      MS_ASSIGN_OR_RETURN(std::vector<RankElements> e, rank_elements(config, l));
      it = elements.emplace(key, std::move(e)).first;
    }
    // Memory first: it is cheap, and on a large model most layouts do not fit, so their
    // pipelines need no replay.
    MS_ASSIGN_OR_RETURN(const std::vector<RankMemory> memory,
                        rank_memory(config, l, it->second, cluster.bytes_per_element(),
                                    cluster.runtime_overhead_mib));
    const double peak = peak_rank(memory).total_mib();
    if (smallest_peak < 0 || peak < smallest_peak) smallest_peak = peak;
    if (peak > limit_mib) {
      ++result.over_memory;
      continue;
    }
    MS_ASSIGN_OR_RETURN(Prediction p, predict(model, config, l, it->second, world));
    result.ranked.push_back(std::move(p));
  }
  if (result.considered == 0) {
    return InvalidArgument("no parallel layout of the model fits " + std::to_string(world) +
                           " ranks with train.global_batch " +
                           std::to_string(config.train.global_batch) +
                           " (tp must split the heads and d_ff, pp the layers, dp the batch)");
  }
  if (result.ranked.empty()) {
    char line[200];
    std::snprintf(line, sizeof(line), "%.1f GiB", smallest_peak / 1024.0);
    return InvalidArgument("none of the " + std::to_string(result.considered) +
                           " layouts fits memory_per_rank_gib " +
                           std::to_string(cluster.memory_per_rank_gib) + " of " + cluster.source +
                           ": the smallest peak is " + line +
                           " per rank; use more ranks or "
                           "a smaller train.global_batch");
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const Prediction& a, const Prediction& b) { return a.step_s < b.step_s; });
  result.recommendation = recommend(result.ranked);
  keep = std::max(keep, keep > 0 ? result.recommendation.index + 1 : 0);
  if (keep > 0 && result.ranked.size() > keep) result.ranked.resize(keep);
  return result;
}

Result<Scaling> parse_what_if(const std::string& text) {
  Scaling s;
  std::stringstream in(text);
  std::string part;
  bool any = false;
  while (std::getline(in, part, ',')) {
    const size_t eq = part.find('=');
    const std::string key = part.substr(0, eq);
    char* end = nullptr;
    const double value = eq == std::string::npos ? 0 : std::strtod(part.c_str() + eq + 1, &end);
    if (eq == std::string::npos || end == part.c_str() + eq + 1 || *end != '\0' || !(value > 0)) {
      return InvalidArgument("--what-if " + text + ": '" + part +
                             "' must be net=<factor> or compute=<factor> with a factor above 0");
    }
    if (key == "net") {
      s.net = value;
    } else if (key == "compute") {
      s.compute = value;
    } else {
      return InvalidArgument("--what-if " + text + ": unknown factor '" + key +
                             "' (net scales link speed, compute the device's)");
    }
    any = true;
  }
  if (!any)
    return InvalidArgument("--what-if is empty: give net=<factor>, compute=<factor> or both");
  return s;
}

}  // namespace ms::plan
