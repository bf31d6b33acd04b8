// Straggler what-if analysis (Lin et al., OSDI 2025) over a job's per-rank traces. The trace is
// replayed (replay.h) three ways:
//   actual  - measured durations; must match the measured span (checked in tests, within 5%);
//   ideal   - every compute op at the mean duration of its group (same op and stage, over all
//             ranks, micro-batches and steps), every transfer at the median of its group (same
//             op, group kind and size), every gap at its group's median (a compute op's gap
//             by op alone, across stages: host time does not depend on the layers run);
//   what-if - ideal durations for one subset only: one worker (rank), one pipeline stage or one
//             op type, measured durations elsewhere.
// Slowdown S = T_actual / T_ideal; waste = T_actual - T_ideal. The share of a subset is
// (T_actual - T_fix_subset) / (T_actual - T_ideal): the part of the waste that fixing only that
// subset would recover. Shares of different subsets may overlap, so they need not sum to 1.
// A collective is idealized for a subset when any of its participants belongs to it, and so is a
// pipeline send/recv pair (its transfer time, held by the recv).
// Pipeline-parallel traces also get their measured and theoretical bubble (pipeline_bubble.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "diag/pipeline_bubble.h"
#include "diag/replay.h"
#include "telemetry/schema.h"

namespace ms::diag {

struct WhatIf {
  std::string name;  // "rank 2", "stage 1", "fwd"
  double fixed_s = 0;  // replayed span with only this subset idealized
  double share = 0;    // fraction of the waste that fixing it recovers
};

struct StragglerReport {
  int ranks = 0;
  std::vector<int64_t> steps;
  double measured_s = 0, actual_s = 0, ideal_s = 0;
  double slowdown = 1, waste_s = 0;
  std::vector<WhatIf> workers, stages, ops;  // workers by rank; stages and ops by name
  // heatmap[rank][i]: duration of steps[i] as replayed / its duration with only that rank fixed
  // (1 = the rank costs that step nothing).
  std::vector<std::vector<double>> heatmap;
  PipelineBubble pipeline;  // present only for traces with pipeline sends/recvs
  double replay_error() const { return measured_s > 0 ? actual_s / measured_s - 1 : 0; }
};

// The most events all what-if replays together may process (one replay per rank, stage and
// op type, plus the actual and ideal ones): about a minute on one core.
inline constexpr double kMaxReplayWork = 5e7;

// Runs the analysis. Errors from build_program / replay pass through (naming the broken
// group and seq); InvalidArgument when the traces hold no events, or when (ranks + stages +
// op types + 2) x events exceeds kMaxReplayWork.
Result<StragglerReport> analyze_stragglers(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces);

nlohmann::ordered_json straggler_report_json(const StragglerReport& report);

}  // namespace ms::diag
