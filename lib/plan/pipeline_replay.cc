// Event replay of pipeline action lists; see pipeline_replay.h.
#include "plan/pipeline_replay.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace ms::plan {
namespace {

using parallel::PpAction;
using parallel::PpOp;

// A message on the wire: (kind: 0 activation / 1 gradient, destination rank, micro-batch,
// destination chunk) -> arrival time. Virtual stage s = chunk * pp + rank.
using MessageKey = std::tuple<int, int, int, int>;

double cost_of(const PpAction& a, const ChunkTimes& t, bool split) {
  switch (a.op) {
    case PpOp::kForward:
      return t.forward;
    case PpOp::kBackward:
      return t.backward_input + t.backward_weight;
    case PpOp::kBackwardInput:
      return split ? t.backward_input : t.backward_input + t.backward_weight;
    case PpOp::kBackwardWeight:
      return t.backward_weight;
    default:
      return 0;
  }
}

bool is_compute(PpOp op) {
  return op == PpOp::kForward || op == PpOp::kBackward || op == PpOp::kBackwardInput ||
         op == PpOp::kBackwardWeight;
}

// The message a send posts or a receive waits for, keyed at its destination.
MessageKey message_of(const PpAction& a, int rank, int pp) {
  const int stage = a.chunk * pp + rank;
  if (a.op == PpOp::kSendActivation) {
    const int dst = stage + 1;
    return {0, dst % pp, a.micro_batch, dst / pp};
  }
  if (a.op == PpOp::kSendGrad) {
    const int dst = stage - 1;
    return {1, dst % pp, a.micro_batch, dst / pp};
  }
  return {a.op == PpOp::kRecvActivation ? 0 : 1, rank, a.micro_batch, a.chunk};
}

}  // namespace

Result<ReplayResult> replay_pipeline(const parallel::PpScheduleShape& shape,
                                     const std::vector<std::vector<ChunkTimes>>& chunks,
                                     double p2p_seconds) {
  MS_RETURN_IF_ERROR(parallel::check_pp_schedule(shape));
  const int pp = shape.pp;
  if (chunks.size() != static_cast<size_t>(pp)) {
    return InvalidArgument("replay_pipeline: costs for " + std::to_string(chunks.size()) +
                           " ranks, pipeline has " + std::to_string(pp));
  }
  std::vector<std::vector<PpAction>> lists(static_cast<size_t>(pp));
  for (int r = 0; r < pp; ++r) {
    MS_ASSIGN_OR_RETURN(lists[static_cast<size_t>(r)], parallel::pp_schedule(shape, r));
  }
  const bool split = shape.kind == parallel::PpScheduleKind::kZeroBubble;
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  std::vector<double> clock(static_cast<size_t>(pp), 0);
  std::map<MessageKey, double> arrivals;
  ReplayResult out;
  out.busy.assign(static_cast<size_t>(pp), 0);
  // Advance every rank as far as its receives allow; a pass with no progress is a deadlock.
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const auto& list = lists[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      double& t = clock[static_cast<size_t>(r)];
      for (; i < list.size(); ++i, progress = true) {
        const PpAction& a = list[i];
        if (a.op == PpOp::kRecvActivation || a.op == PpOp::kRecvGrad) {
          const auto it = arrivals.find(message_of(a, r, pp));
          if (it == arrivals.end()) break;
          t = std::max(t, it->second);
        } else if (a.op == PpOp::kSendActivation || a.op == PpOp::kSendGrad) {
          arrivals[message_of(a, r, pp)] = t + p2p_seconds;
        } else if (is_compute(a.op)) {
          const auto& rank_chunks = chunks[static_cast<size_t>(r)];
          if (static_cast<size_t>(a.chunk) >= rank_chunks.size()) {
            return InvalidArgument("replay_pipeline: no costs for rank " + std::to_string(r) +
                                   " chunk " + std::to_string(a.chunk));
          }
          const double c = cost_of(a, rank_chunks[static_cast<size_t>(a.chunk)], split);
          t += c;
          out.busy[static_cast<size_t>(r)] += c;
          if (r == 0 && (a.op == PpOp::kBackward || a.op == PpOp::kBackwardInput ||
                         a.op == PpOp::kBackwardWeight)) {
            out.last_backward = c;
          }
        }
      }
    }
  }
  for (int r = 0; r < pp; ++r) {
    if (next[static_cast<size_t>(r)] != lists[static_cast<size_t>(r)].size()) {
      return FailedPrecondition("replay_pipeline: rank " + std::to_string(r) +
                                " waits forever at action " +
                                std::to_string(next[static_cast<size_t>(r)]));
    }
  }
  out.makespan = *std::max_element(clock.begin(), clock.end());
  double idle = 0;
  for (double b : out.busy) idle += out.makespan > 0 ? 1 - b / out.makespan : 0;
  out.bubble = idle / pp;
  return out;
}

}  // namespace ms::plan
