// Expert load of a MoE training run from its telemetry step records (StepRecord::expert_tokens
// and dropped_tokens): per MoE layer, each expert's share of the routed tokens over all steps,
// the imbalance overall and in the worst step, the dropped tokens, and a verdict. Behind
// `ms-diagnose moe-load` (docs/diagnose.md).
//
// The trainer writes global counts (summed over the job's ranks), so every rank's file holds the
// same numbers and one rank's records are summarized alone.
//
// imbalance = max expert load / mean expert load over a layer's experts: 1.0 is perfectly
// balanced, E (the expert count) is every token on one expert. A layer is "balanced" when its
// overall imbalance is below `balanced_below`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "telemetry/reader.h"

namespace ms::diag {

inline constexpr double kBalancedMoeImbalance = 1.25;

struct MoeLayerLoad {
  int layer = 0;                // index among the MoE layers (0 = the first MoE layer)
  std::vector<int64_t> tokens;  // [expert] routed over all steps
  std::vector<double> shares;   // [expert] tokens / routed; 0 when nothing was routed
  int64_t routed = 0;           // sum of tokens
  double imbalance = 0;         // over all steps; 0 when nothing was routed
  int hot_expert = 0;           // the expert with the most tokens (the lowest index on a tie)
  int idle_experts = 0;         // experts that got no token in any step
  double worst_step_imbalance = 0;  // the largest of the steps' imbalances
  int64_t worst_step = -1;          // its step number; -1 when nothing was routed
  int64_t dropped = 0;              // over all steps
  double dropped_share = 0;         // dropped / (routed + dropped)
  int64_t steps_with_drops = 0;
  int64_t most_dropped = 0;         // the most any one step dropped
  int64_t most_dropped_step = -1;   // that step; -1 when none dropped
  std::string verdict;              // "balanced", or which expert is hot; drops appended
};

struct MoeLoadReport {
  std::string source;  // the rank file read
  int rank = 0;
  int64_t steps = 0;   // distinct steps with expert counts
  int64_t first_step = 0, last_step = 0;
  int64_t steps_without_counts = 0;  // step records lacking expert_tokens (older writers)
  int experts = 0;                   // per layer
  double balanced_below = kBalancedMoeImbalance;
  std::vector<MoeLayerLoad> layers;
};

// Summarizes one rank's step records. A step written more than once (a resumed run repeats the
// steps after its checkpoint) counts once, by its last record. NotFound when no record has
// expert_tokens; Corruption naming both records' file:line when the number of MoE layers or
// experts differs between records (or within one: a record built by hand may be ragged), and
// naming the record when a total exceeds int64; InvalidArgument when balanced_below < 1.
// Counts are taken as the reader returns them: non-negative.
Result<MoeLoadReport> summarize_moe_load(const telemetry::RankTelemetry& rank,
                                         double balanced_below = kBalancedMoeImbalance);

// The report as `ms-diagnose moe-load` prints it: per layer a table of experts (tokens, share,
// load / mean), then one summary row per layer with its verdict.
std::string moe_load_text(const MoeLoadReport& report);
nlohmann::ordered_json moe_load_json(const MoeLoadReport& report);

}  // namespace ms::diag
