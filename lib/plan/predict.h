// The predicted step of one layout: per-chunk op costs (op_costs.h) at the layout's shapes,
// tensor- and expert-parallel collectives inside each chunk, the pipeline replayed with the
// trainer's schedule (pipeline_replay.h), then the data-parallel gradient reduction (ZeRO-1:
// reduce-scatter plus all-gather of the parameters; else all-reduce) and the optimizer update.
#pragma once

#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "plan/op_costs.h"

namespace ms::plan {

// Bus bytes one rank moves per step on each axis (bytes x bus factor, the nccl-tests busbw
// convention), and the seconds the step spends in them.
struct AxisTraffic {
  double bytes = 0;
  double seconds = 0;
};

struct Prediction {
  Layout layout;
  double step_s = 0;
  double mfu = 0;  // model FLOPs (no recomputation) / (step time x ranks x peak per rank)
  double tokens_per_s = 0;
  double bubble = 0;        // pipeline idle fraction from the replay
  double compute_s = 0;     // pipeline makespan (compute, tp/ep collectives, p2p)
  double dp_exposed_s = 0;  // dp reduction left after any overlap
  bool dp_overlap_measured = false;  // from the profile's dp probe (Cluster::dp_cost)
  double optimizer_s = 0;
  // Pipeline rank 0's forward and backward (input and weight) time per step, summed over its
  // micro-batches and chunks, collectives inside them included: what the trainer's telemetry
  // reports as phases.fwd_s and phases.bwd_s.
  double forward_s = 0, backward_s = 0;
  // The factors the layers' op sums were scaled by (measured layer / op sum at the layout's
  // micro-batch, predict.cc); 1 where the cluster file has no layer measured at it.
  double layer_calibration_fwd = 1, layer_calibration_bwd = 1;
  AxisTraffic dp, tp, pp, ep;
  AxisTraffic cp;  // the ring's key/value and dK/dV hops; seconds on the wire, mostly hidden
  // The context-parallel attention came from the ring measured at this shape (op_costs.h's
  // cp_attention_key) rather than 1/cp of the attention plus modelled hops.
  bool cp_ring_measured = false;
  std::vector<RankMemory> memory;  // per pipeline rank
  RankMemory peak;                 // the largest
  // The error band, step_s +- band_s: the profile's own spread of its timings (the cluster's
  // profile.spread) as a share of the step. 0 for a cluster file with no measured spread.
  double band_s = 0;
  // The cluster file was profiled while other processes took kDisturbedLoadShare or more of the
  // CPU: its op times, and so this step, may be slow.
  bool disturbed_profile = false;
  double peak_gib() const { return peak.total_mib() / 1024.0; }
  // Seconds per step a rank depends on its peers: what every axis puts on the wire (hidden or
  // not) and the pipeline's idle time (bubble x makespan). The tie-break prefers less of it: the
  // model is least sure there, since a peer that is descheduled on a loaded machine stretches
  // every message and every pipeline wait (issue 50's bench: a zero-bubble pick tied within the
  // band on wire time alone measured slowest, waiting 0.85 s per step for its peer).
  double peer_wait_s() const {
    return dp.seconds + tp.seconds + pp.seconds + ep.seconds + cp.seconds + bubble * compute_s;
  }
};

// Predicts `layout` for `config` on `model`'s cluster with `world` ranks. `elements`: from
// rank_elements(config, layout).
Result<Prediction> predict(const CostModel& model, const config::RunConfig& config,
                           const Layout& layout, const std::vector<RankElements>& elements,
                           int world);

}  // namespace ms::plan
