// Pipeline-parallel schedules as pure functions (issue 13, item 2): for a pipeline of `pp`
// ranks, each holding `vpp` model chunks (virtual stages), and `micro_batches` micro-batches,
// the ordered list of actions one rank performs in a training step. Nothing here touches MPI:
// the trainer will execute the lists, the dry run prints them, and the simulator below proves
// every combination completes.
//
// Stages: the model is cut into S = pp * vpp virtual stages; rank r holds chunks c = 0..vpp-1,
// chunk c being virtual stage s = c * pp + r (Megatron's interleaved placement; vpp = 1 is the
// plain pipeline). Virtual stage s receives activations from s - 1 and sends them to s + 1;
// gradients flow back the other way. Stage 0 owns the embedding, stage S - 1 the loss.
//
// Schedules:
//   1f1b         warm-up forwards (pp - r - 1 of them), then one forward and one backward in
//                turn, then the remaining backwards: at most pp - r micro-batches in flight.
//   interleaved  1F1B over the chunks in Megatron's order (micro-batches in groups of pp, each
//                group through chunk 0, then chunk 1, ...); needs vpp >= 2 and micro_batches a
//                multiple of pp. Cuts the bubble by vpp.
//   zero-bubble  ZB-H1 ("Zero Bubble Pipeline Parallelism"): the backward split into the
//                input-gradient pass (B, on the critical path) and the weight-gradient pass (W,
//                deferred to fill the bubbles), with 1F1B's limit on micro-batches in flight.
//                vpp = 1. The order is built by list scheduling under unit costs F = B = W = 1:
//                each rank runs a B whose gradient has arrived, else a forward when the limit
//                allows, else a deferred W; deterministic, so still a pure function.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::parallel {

enum class PpScheduleKind { k1F1B, kInterleaved, kZeroBubble };

// "1f1b", "interleaved", "zero-bubble"; parse_pp_schedule is the inverse (InvalidArgument
// listing the names otherwise).
std::string_view pp_schedule_name(PpScheduleKind kind);
Result<PpScheduleKind> parse_pp_schedule(std::string_view name);

enum class PpOp {
  kRecvActivation,  // from virtual stage - 1
  kForward,
  kSendActivation,  // to virtual stage + 1
  kRecvGrad,        // from virtual stage + 1
  kBackward,        // input and weight gradients together (1f1b, interleaved)
  kBackwardInput,   // zero-bubble: the input gradient only
  kBackwardWeight,  // zero-bubble: the weight gradient, deferred
  kSendGrad,        // to virtual stage - 1
};

// "recv_act", "F", "send_act", "recv_grad", "B", "Bi", "W", "send_grad".
std::string_view pp_op_name(PpOp op);

struct PpAction {
  PpOp op = PpOp::kForward;
  int micro_batch = 0;
  int chunk = 0;  // the model chunk on this rank (virtual stage chunk * pp + rank)
  int peer = -1;  // for sends and receives: the pipeline rank on the other side
  bool operator==(const PpAction&) const = default;
};

struct PpScheduleShape {
  int pp = 1;
  int vpp = 1;
  int micro_batches = 1;
  PpScheduleKind kind = PpScheduleKind::k1F1B;
};

// InvalidArgument naming the rule: pp >= 1, vpp >= 1, micro_batches >= 1; interleaved needs
// vpp >= 2 and micro_batches a multiple of pp (parallel.vpp, train micro-batches per step);
// 1f1b and zero-bubble need vpp = 1.
Status check_pp_schedule(const PpScheduleShape& shape);

// Rank `rank`'s actions for one step, in order. Every forward is preceded by the receive of its
// input (except on virtual stage 0) and followed by the send of its output (except on the last
// virtual stage), every backward likewise with gradients; each (micro-batch, chunk) is
// forwarded once and backpropagated once (B, or Bi then W).
Result<std::vector<PpAction>> pp_schedule(const PpScheduleShape& shape, int rank);

// The bubble the schedule is designed to have, as a fraction of each rank's step time, with a
// forward costing 1 and a backward 2 (Bi 1 and W 1): 1f1b (pp - 1) / (m + pp - 1), interleaved
// (pp - 1) / (vpp m + pp - 1) in chunk units; zero-bubble from its simulation under those
// costs (its construction's own cost model).
Result<double> pp_theoretical_bubble(const PpScheduleShape& shape);

// Runs every rank's list against the others: the one replay of pipeline action lists, behind
// the schedules' theoretical bubble and `ms-train plan`'s pipeline replay (plan/pipeline_replay.h,
// with each rank's measured costs and the wire time). Sends are buffered (posted and forgotten,
// as a nonblocking send), a receive waits for the matching send and completes no earlier than
// `p2p_seconds` after it, compute waits for nothing else. Each action takes its cost: forward
// f, backward b = bi + bw, Bi bi, W bw, sends and receives 0. OK with the step's makespan, the
// mean bubble fraction over ranks (1 - busy / makespan; 0 for a rank when the makespan is 0),
// each rank's busy time and the cost of each rank's last backward pass (B, Bi or W: what the
// data-parallel reduction may hide behind). FailedPrecondition when the lists deadlock (naming
// the ranks and what each waits for) or break a dependency (a backward before its forward, a
// send of something not computed, a micro-batch skipped or repeated).
struct PpCosts {
  double forward = 1, backward_input = 1, backward_weight = 1;
};
struct PpSimulation {
  double makespan = 0;
  double bubble = 0;
  std::vector<double> busy;           // by pipeline rank
  std::vector<double> last_backward;  // by pipeline rank
};
// `chunk_costs[r][c]`: rank r's chunk c. InvalidArgument when a rank or chunk has no costs.
Result<PpSimulation> simulate_pp(const PpScheduleShape& shape,
                                 const std::vector<std::vector<PpAction>>& ranks,
                                 const std::vector<std::vector<PpCosts>>& chunk_costs,
                                 double p2p_seconds);
// The same costs for every chunk of every rank, and no wire time.
Result<PpSimulation> simulate_pp(const PpScheduleShape& shape,
                                 const std::vector<std::vector<PpAction>>& ranks,
                                 const PpCosts& costs = {});

// The most micro-batches rank `rank` holds between a forward and its backward (B or Bi) at
// once, over all its chunks: how many micro-batches' activations it keeps (1f1b: pp - rank).
// 0 for a shape check_pp_schedule refuses.
int pp_peak_in_flight(const PpScheduleShape& shape, int rank);

// The schedule as text for `ms-train --dry-run`: one line per rank, compute actions as F3, B3
// (or Bi3 and W3), with the chunk as F3.1 when vpp > 1, and the theoretical bubble.
Result<std::string> describe_pp_schedule(const PpScheduleShape& shape);

}  // namespace ms::parallel
