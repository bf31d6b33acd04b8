// The pipeline bubble of a pipeline-parallel trace, measured, beside the bubble its schedule is
// designed to have (parallel::pp_theoretical_bubble). Part of `ms-diagnose stragglers`.
//
// Pipelines: ranks joined by pipeline sends and recvs (comm events of group kind "pp") form one
// pipeline (connected components, so one communicator per pipeline and one per link both work).
// Pipeline compute: events "fwd", "bwd", "bwd_input", "bwd_weight".
//
// Measured bubble of rank r in step s: 1 - busy / span, where busy is the summed duration of r's
// pipeline compute in step s, and span runs from the first pipeline compute start to the last
// pipeline compute end of r's PIPELINE in step s. The span is the pipeline's, not the rank's
// own, because the bubble is the idle time of a rank during the step: the last stage of a 1F1B
// pipeline idles while the warm-up forwards reach it and while the cool-down backwards drain
// out, both outside its own first-to-last compute span. With this span a balanced 1F1B trace
// with forward 1 and backward 2 measures exactly (pp - 1) / (m + pp - 1) on every rank, the
// theoretical value. Per rank the mean over steps is reported, then the mean over ranks.
//
// The schedule shape is inferred from the trace itself (not from the run's config):
//   pp             ranks per pipeline (the largest pipeline);
//   vpp            (largest virtual stage + 1) / pp;
//   micro_batches  distinct mb values of one rank in one step (the largest count);
//   schedule       zero-bubble when "bwd_input" occurs, else interleaved when vpp > 1, else 1f1b.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "telemetry/schema.h"

namespace ms::diag {

struct RankBubble {
  int rank = 0;
  int pipeline = 0;    // index of its pipeline, in order of lowest rank
  int stage = 0;       // its lowest virtual stage (= its pipeline rank)
  double bubble = 0;   // mean over steps
};

struct PipelineBubble {
  bool present = false;  // the trace has pipeline sends/recvs and pipeline compute
  int pp = 0, vpp = 1, micro_batches = 0, pipelines = 0;
  std::string schedule;  // inferred: "1f1b", "interleaved" or "zero-bubble"
  std::vector<RankBubble> ranks;      // ranks with pipeline compute, ascending
  std::vector<int64_t> steps;         // ascending
  std::vector<double> step_bubble;    // per step: mean over ranks
  double measured = 0;                // mean over ranks of RankBubble::bubble
  bool theoretical_known = false;
  double theoretical = 0;             // pp_theoretical_bubble of the inferred shape
  std::string theoretical_error;      // why not known (an impossible inferred shape)
};

// Measures the bubble of measured traces (element r: rank r's events, on one clock). A trace
// without pipeline sends/recvs gives present = false.
PipelineBubble measure_pipeline_bubble(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces);

// True for the ops that count as pipeline compute.
bool is_pipeline_compute(const telemetry::TraceEvent& e);

// The report's text block ("pipeline: ..." lines); empty when not present.
std::string pipeline_bubble_text(const PipelineBubble& bubble);
nlohmann::ordered_json pipeline_bubble_json(const PipelineBubble& bubble);

}  // namespace ms::diag
