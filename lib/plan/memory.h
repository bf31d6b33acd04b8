// Peak memory of one rank under a layout, split as the trainer's start-up line splits it:
// weights, gradients and optimizer state (train/layout_report.h's rank_memory_plan, for the
// slice the rank holds: its tp shard, its pipeline stages, its experts under ep) and
// activations (model::activation_bytes_of of its chunks, times the micro-batches its schedule
// keeps in flight: parallel::pp_peak_in_flight, plus the operand copies zero-bubble keeps for its
// deferred weight gradients). Under ZeRO-1 the gradients include the reduced 1/dp shard the
// distributed optimizer holds besides the full gradients, which rank_memory_plan omits. Pure:
// nothing is allocated.
#pragma once

#include <cstdint>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "plan/layout.h"

namespace ms::plan {

struct RankMemory {
  int pp_rank = 0;
  int64_t dense_elements = 0, expert_elements = 0;  // local parameter elements
  double weights_mib = 0, gradients_mib = 0, optimizer_mib = 0, activations_mib = 0;
  double overhead_mib = 0;  // the cluster's runtime_overhead_mib
  double scratch_mib = 0;   // operand copies at bf16 (train::bf16_scratch_bytes)
  double total_mib() const {
    return weights_mib + gradients_mib + optimizer_mib + activations_mib + overhead_mib +
           scratch_mib;
  }
};

// The largest model the planner sizes: its parameters, its tensors and one rank's activations
// at tp 1 (the most any layout holds) within 2^53 bytes (8 PiB). Far above any cluster's memory,
// and low enough that every element and byte count the planner forms, in int64 and in double,
// stays exact: beyond it the figures wrapped (a layout of -6e10 GiB was recommended).
inline constexpr double kMaxPlannedBytes = 9007199254740992.0;  // 2^53
// The most tensors (n_layers x (3 num_experts + 16)) the planner enumerates.
inline constexpr double kMaxPlannedTensors = 16777216.0;  // 2^24

// OK when `config`'s model fits the planner's sizes; InvalidArgument naming the model.* and
// train.* keys and the bytes (or tensor count) they come to otherwise. Computed in double from
// the keys alone, before any per-tensor work.
Status check_model_fits_planner(const config::RunConfig& config);

// The local parameter elements of each pipeline rank (tp rank 0, whose slice is the largest):
// dense and routed-expert ones apart. Depends only on tp, pp, vpp, ep and pp_layers, so a search
// computes it once per such combination.
struct RankElements {
  int64_t dense = 0, expert = 0;
};
Result<std::vector<RankElements>> rank_elements(const config::RunConfig& config,
                                                const Layout& layout);

// Per pipeline rank, for element bytes `bytes` (4: f32 everywhere, as on the CPU; 2: bf16
// weights and activations with f32 gradients, master weights and moments, as on GPUs).
Result<std::vector<RankMemory>> rank_memory(const config::RunConfig& config, const Layout& layout,
                                            const std::vector<RankElements>& elements, int bytes,
                                            double overhead_mib);

// The pipeline rank with the largest total.
const RankMemory& peak_rank(const std::vector<RankMemory>& ranks);

}  // namespace ms::plan
