// Planning disaggregated MoE serving (ms-infer plan), after MegaScale-Infer's deployment
// search: from costs measured on the real model (one layer's attention side for a micro-batch
// of b decode tokens, one expert over n rows, the per-step embedding/lm_head/sampling) and a
// link model (latency + bytes / bandwidth), choose the number of attention ranks, micro-batches
// m and micro-batch size that maximize decode throughput with the time per output token under
// a target.
//
// The pipeline model: per layer an attention rank spends Ta on each of its m micro-batches, an
// expert rank Te on each (the rows of that micro-batch from every attention rank, spread over
// its experts), and a micro-batch's tokens take Tc each way. A layer then takes
//   period = max(m * Ta, m * Te, Ta + Te + 2 Tc)
// (each side's total work, or one micro-batch's round trip when m is too small to hide it),
// and a decode step L * period + T_head. Both sides stay busy when m * Tf >= Ta + Te + 2 Tc; with
// Ta = Te = Tf that is the paper's m >= 2 (1 + Tc / Tf). Routing is assumed balanced.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/transformer.h"

namespace ms::infer {

// Seconds, measured at the listed sizes and interpolated linearly between them (extrapolated
// linearly from the last two beyond).
struct CostCurve {
  std::vector<double> at;       // sizes, increasing
  std::vector<double> seconds;  // same length
  double operator()(double size) const;
};

struct ServingCosts {
  int64_t layers = 0, num_experts = 0, top_k = 0, d_model = 0;
  int64_t context = 0;     // KV positions each decode token attends over
  CostCurve attention;     // one layer's attention side for b decode tokens (incl. router,
                           // combine, shared expert)
  CostCurve expert;        // one expert over n rows
  CostCurve head;          // embedding + final norm + lm_head + sampling for b tokens
  double link_latency_s = 5e-6;
  double link_bytes_per_s = 10e9;
  std::string link_source;  // "measured ..." or "assumed ..."
};

// Times the model's own stages on this process: decode micro-batches of each size in
// `batch_sizes` at `context` cached positions (the cache content does not change the cost),
// the routed experts at each row count in `expert_rows`, the head. `model` must hold every
// parameter. InvalidArgument for a dense model or a context beyond max_seq_len.
Result<ServingCosts> measure_serving_costs(model::Transformer& model, int64_t context,
                                           const std::vector<int64_t>& batch_sizes,
                                           const std::vector<int64_t>& expert_rows, int repeats);

struct PlanRow {
  int attention = 0, experts = 0, micro_batches = 0;
  int64_t micro_batch = 0;  // decode tokens per micro-batch per attention rank
  double ta = 0, te = 0, tc = 0;
  double tpot_s = 0;        // time per output token (one decode step)
  double tokens_per_s = 0;  // output tokens/s of the whole deployment
  double m_needed = 0;      // the smallest m that keeps both sides busy: (Ta + Te + 2 Tc) / max
};

// Ta, Te, Tc and the step time of one candidate.
PlanRow evaluate_plan(const ServingCosts& c, int attention, int experts, int micro_batches,
                      int64_t micro_batch);

// Point-to-point latency (8-byte round trips / 2) and bandwidth (4 MiB messages) between world
// ranks 0 and 1, measured with `comm`; every rank must call it, ranks other than 0 and 1 only
// wait. Fills costs.link_* on every rank (broadcast from rank 0).
Status measure_link(comm::Communicator& comm, ServingCosts& costs);

// Every candidate with 1 <= attention < ranks, experts <= num_experts, m in [1, max_micro],
// micro-batch sizes from `micro_batch_sizes`, whose time per output token is within
// `tpot_target_s`; best throughput first. Empty when nothing meets the target.
std::vector<PlanRow> search_plans(const ServingCosts& c, int ranks, double tpot_target_s,
                                  int max_micro, const std::vector<int64_t>& micro_batch_sizes);

// Colocated serving on `ranks` replicas at batch b per rank (the baseline): each step runs the
// whole model for b tokens.
PlanRow colocated_plan(const ServingCosts& c, int ranks, int64_t batch);

}  // namespace ms::infer
