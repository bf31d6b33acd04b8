// Pipeline schedules and their simulator (pp_schedule.h).
#include "parallel/pp_schedule.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <tuple>
#include <utility>

namespace ms::parallel {
namespace {

// Appends the actions of one forward or backward pass of (mb, chunk) on `rank`: the receive
// of its input, the compute, the send of its output, where the neighbouring stage exists.
struct Emitter {
  const PpScheduleShape& shape;
  int rank;
  std::vector<PpAction>& out;

  int stage(int chunk) const { return chunk * shape.pp + rank; }
  int stages() const { return shape.pp * shape.vpp; }
  int rank_of(int s) const { return s % shape.pp; }

  void forward(int mb, int chunk) {
    const int s = stage(chunk);
    if (s > 0) out.push_back({PpOp::kRecvActivation, mb, chunk, rank_of(s - 1)});
    out.push_back({PpOp::kForward, mb, chunk, -1});
    if (s + 1 < stages()) out.push_back({PpOp::kSendActivation, mb, chunk, rank_of(s + 1)});
  }
  void backward(int mb, int chunk, PpOp op) {
    const int s = stage(chunk);
    if (s + 1 < stages()) out.push_back({PpOp::kRecvGrad, mb, chunk, rank_of(s + 1)});
    out.push_back({op, mb, chunk, -1});
    if (s > 0) out.push_back({PpOp::kSendGrad, mb, chunk, rank_of(s - 1)});
  }
  void weight(int mb, int chunk) { out.push_back({PpOp::kBackwardWeight, mb, chunk, -1}); }
};

std::vector<PpAction> one_f_one_b(const PpScheduleShape& shape, int rank) {
  std::vector<PpAction> out;
  Emitter e{shape, rank, out};
  const int m = shape.micro_batches;
  const int warmup = std::min(shape.pp - rank - 1, m);
  for (int i = 0; i < warmup; ++i) e.forward(i, 0);
  for (int i = 0; i < m - warmup; ++i) {
    e.forward(i + warmup, 0);
    e.backward(i, 0, PpOp::kBackward);
  }
  for (int i = m - warmup; i < m; ++i) e.backward(i, 0, PpOp::kBackward);
  return out;
}

// Megatron's interleaved order: unit k of m * vpp goes through chunk (k / pp) % vpp (reversed
// for backwards) with micro-batch (k / (pp vpp)) pp + k % pp.
std::vector<PpAction> interleaved(const PpScheduleShape& shape, int rank) {
  std::vector<PpAction> out;
  Emitter e{shape, rank, out};
  const int pp = shape.pp, vpp = shape.vpp, total = shape.micro_batches * vpp;
  const auto mb_of = [&](int k) { return (k / (pp * vpp)) * pp + k % pp; };
  const auto fchunk = [&](int k) { return (k / pp) % vpp; };
  const auto bchunk = [&](int k) { return vpp - 1 - (k / pp) % vpp; };
  const int warmup = shape.micro_batches == pp
                         ? total
                         : std::min((pp - rank - 1) * 2 + (vpp - 1) * pp, total);
  for (int k = 0; k < warmup; ++k) e.forward(mb_of(k), fchunk(k));
  for (int k = 0; k < total - warmup; ++k) {
    e.forward(mb_of(k + warmup), fchunk(k + warmup));
    e.backward(mb_of(k), bchunk(k), PpOp::kBackward);
  }
  for (int k = total - warmup; k < total; ++k) e.backward(mb_of(k), bchunk(k), PpOp::kBackward);
  return out;
}

// ZB-H1 by list scheduling under unit costs (see the header), for every rank at once.
std::vector<std::vector<PpAction>> zero_bubble_all(const PpScheduleShape& shape) {
  const int pp = shape.pp, m = shape.micro_batches;
  std::vector<std::vector<PpAction>> out(static_cast<size_t>(pp));
  std::vector<int> next_f(pp, 0), b_done(pp, 0), w_done(pp, 0);
  std::vector<std::deque<int>> w_pending(static_cast<size_t>(pp));
  // Arrival times: act[r][mb] when stage r may forward mb; grad[r][mb] when it may B it.
  const int kNever = 1 << 30;
  std::vector<std::vector<int>> act(pp, std::vector<int>(m, kNever));
  std::vector<std::vector<int>> grad(pp, std::vector<int>(m, kNever));
  for (int i = 0; i < m; ++i) act[0][static_cast<size_t>(i)] = 0;
  int remaining = 3 * pp * m;
  // Every time unit some rank can act (the dataflow has no cycle), so this ends well within
  // the bound; the bound only guards against a bug turning into a hang.
  for (int t = 0; remaining > 0 && t < 4 * remaining + 4 * pp * m + pp; ++t) {
    // Decide every rank's action at time t from what arrived by t, then publish the results.
    std::vector<std::pair<int, int>> finished_f, finished_b;  // (rank, mb)
    for (int r = 0; r < pp; ++r) {
      Emitter e{shape, r, out[static_cast<size_t>(r)]};
      const int in_flight = next_f[r] - b_done[r];
      const int b = b_done[r];
      if (b < next_f[r] && grad[r][b] <= t) {
        e.backward(b, 0, PpOp::kBackwardInput);
        w_pending[r].push_back(b);
        ++b_done[r];
        finished_b.push_back({r, b});
        --remaining;
      } else if (next_f[r] < m && in_flight < pp - r && act[r][next_f[r]] <= t) {
        e.forward(next_f[r], 0);
        finished_f.push_back({r, next_f[r]});
        ++next_f[r];
        --remaining;
      } else if (!w_pending[r].empty()) {
        e.weight(w_pending[r].front(), 0);
        w_pending[r].pop_front();
        ++w_done[r];
        --remaining;
      }
    }
    for (auto [r, mb] : finished_f) {
      if (r + 1 < pp) {
        act[r + 1][mb] = t + 1;
      } else {
        grad[r][mb] = t + 1;  // the last stage's loss gradient is its own
      }
    }
    for (auto [r, mb] : finished_b) {
      if (r > 0) grad[r - 1][mb] = t + 1;
    }
  }
  return out;
}

std::string key_name(int mb, int chunk, int vpp) {
  return std::to_string(mb) + (vpp > 1 ? "." + std::to_string(chunk) : "");
}

}  // namespace

std::string_view pp_schedule_name(PpScheduleKind kind) {
  switch (kind) {
    case PpScheduleKind::k1F1B: return "1f1b";
    case PpScheduleKind::kInterleaved: return "interleaved";
    case PpScheduleKind::kZeroBubble: return "zero-bubble";
  }
  return "1f1b";
}

Result<PpScheduleKind> parse_pp_schedule(std::string_view name) {
  for (PpScheduleKind k :
       {PpScheduleKind::k1F1B, PpScheduleKind::kInterleaved, PpScheduleKind::kZeroBubble}) {
    if (name == pp_schedule_name(k)) return k;
  }
  return InvalidArgument("unknown pipeline schedule '" + std::string(name) +
                         "' (expected 1f1b, interleaved or zero-bubble)");
}

std::string_view pp_op_name(PpOp op) {
  switch (op) {
    case PpOp::kRecvActivation: return "recv_act";
    case PpOp::kForward: return "F";
    case PpOp::kSendActivation: return "send_act";
    case PpOp::kRecvGrad: return "recv_grad";
    case PpOp::kBackward: return "B";
    case PpOp::kBackwardInput: return "Bi";
    case PpOp::kBackwardWeight: return "W";
    case PpOp::kSendGrad: return "send_grad";
  }
  return "?";
}

Status check_pp_schedule(const PpScheduleShape& s) {
  if (s.pp < 1) return InvalidArgument("parallel.pp must be at least 1, got " + std::to_string(s.pp));
  if (s.vpp < 1) {
    return InvalidArgument("parallel.vpp must be at least 1, got " + std::to_string(s.vpp));
  }
  if (s.micro_batches < 1) {
    return InvalidArgument("a pipeline step needs at least one micro-batch, got " +
                           std::to_string(s.micro_batches));
  }
  const std::string name(pp_schedule_name(s.kind));
  if (s.kind == PpScheduleKind::kInterleaved) {
    if (s.vpp < 2) {
      return InvalidArgument("parallel.schedule interleaved needs parallel.vpp >= 2 model chunks "
                             "per rank, got " + std::to_string(s.vpp) + "; use 1f1b for vpp 1");
    }
    if (s.micro_batches % s.pp != 0) {
      return InvalidArgument("parallel.schedule interleaved runs micro-batches in groups of pp, so "
                             "the micro-batches per step (" + std::to_string(s.micro_batches) +
                             ") must be a multiple of parallel.pp (" + std::to_string(s.pp) + ")");
    }
  } else if (s.vpp != 1) {
    return InvalidArgument("parallel.schedule " + name + " runs one model chunk per rank; "
                           "parallel.vpp (" + std::to_string(s.vpp) +
                           ") above 1 needs parallel.schedule interleaved");
  }
  return Status::OK();
}

Result<std::vector<PpAction>> pp_schedule(const PpScheduleShape& shape, int rank) {
  MS_RETURN_IF_ERROR(check_pp_schedule(shape));
  if (rank < 0 || rank >= shape.pp) {
    return InvalidArgument("pipeline rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(shape.pp) + ")");
  }
  switch (shape.kind) {
    case PpScheduleKind::k1F1B: return one_f_one_b(shape, rank);
    case PpScheduleKind::kInterleaved: return interleaved(shape, rank);
    case PpScheduleKind::kZeroBubble: return zero_bubble_all(shape)[static_cast<size_t>(rank)];
  }
  return InvalidArgument("unknown pipeline schedule");
}

Result<PpSimulation> simulate_pp(const PpScheduleShape& shape,
                                 const std::vector<std::vector<PpAction>>& ranks,
                                 const PpCosts& costs) {
  MS_RETURN_IF_ERROR(check_pp_schedule(shape));
  const std::vector<std::vector<PpCosts>> chunk_costs(
      static_cast<size_t>(shape.pp), std::vector<PpCosts>(static_cast<size_t>(shape.vpp), costs));
  return simulate_pp(shape, ranks, chunk_costs, 0);
}

Result<PpSimulation> simulate_pp(const PpScheduleShape& shape,
                                 const std::vector<std::vector<PpAction>>& ranks,
                                 const std::vector<std::vector<PpCosts>>& chunk_costs,
                                 double p2p_seconds) {
  MS_RETURN_IF_ERROR(check_pp_schedule(shape));
  const int pp = shape.pp, S = pp * shape.vpp;
  if (static_cast<int>(ranks.size()) != pp) {
    return InvalidArgument("simulate_pp needs one action list per pipeline rank");
  }
  if (static_cast<int>(chunk_costs.size()) != pp) {
    return InvalidArgument("simulate_pp: costs for " + std::to_string(chunk_costs.size()) +
                           " ranks, pipeline has " + std::to_string(pp));
  }
  for (int r = 0; r < pp; ++r) {
    if (static_cast<int>(chunk_costs[static_cast<size_t>(r)].size()) < shape.vpp) {
      return InvalidArgument("simulate_pp: no costs for rank " + std::to_string(r) + " chunk " +
                             std::to_string(chunk_costs[static_cast<size_t>(r)].size()));
    }
  }
  std::vector<double> last_backward(static_cast<size_t>(pp), 0);
  // A message: (kind 0 activation / 1 gradient, micro-batch, destination virtual stage).
  using Key = std::tuple<int, int, int>;
  std::map<Key, double> in_transit;
  std::vector<size_t> pc(static_cast<size_t>(pp), 0);
  std::vector<double> clock(static_cast<size_t>(pp), 0), busy(static_cast<size_t>(pp), 0);
  // Per (rank, mb, chunk): 1 received act, 2 forwarded, 4 received grad, 8 input grad, 16 weight.
  std::map<std::tuple<int, int, int>, int> done;
  const auto fail = [&](int r, const PpAction& a, const std::string& why) {
    return FailedPrecondition("pipeline rank " + std::to_string(r) + " " +
                              std::string(pp_op_name(a.op)) + " of micro-batch " +
                              std::to_string(a.micro_batch) + " chunk " + std::to_string(a.chunk) +
                              ": " + why);
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const auto& list = ranks[static_cast<size_t>(r)];
      while (pc[r] < list.size()) {
        const PpAction& a = list[pc[r]];
        if (a.micro_batch < 0 || a.micro_batch >= shape.micro_batches || a.chunk < 0 ||
            a.chunk >= shape.vpp) {
          return fail(r, a, "outside the step's micro-batches or chunks");
        }
        const int s = a.chunk * pp + r;
        int& state = done[{r, a.micro_batch, a.chunk}];
        const auto need = [&](int bits, const char* what) -> Status {
          if ((state & bits) == bits) return Status::OK();
          return fail(r, a, std::string("before ") + what);
        };
        const auto once = [&](int bit) -> Status {
          if (state & bit) return fail(r, a, "twice");
          state |= bit;
          return Status::OK();
        };
        if (a.op == PpOp::kRecvActivation || a.op == PpOp::kRecvGrad) {
          const Key key{a.op == PpOp::kRecvGrad ? 1 : 0, a.micro_batch, s};
          auto it = in_transit.find(key);
          if (it == in_transit.end()) break;  // blocked: wait for the sender
          clock[r] = std::max(clock[r], it->second);
          in_transit.erase(it);
          MS_RETURN_IF_ERROR(once(a.op == PpOp::kRecvGrad ? 4 : 1));
        } else if (a.op == PpOp::kSendActivation || a.op == PpOp::kSendGrad) {
          const bool grad = a.op == PpOp::kSendGrad;
          const int to = grad ? s - 1 : s + 1;
          if (to < 0 || to >= S || a.peer != to % pp) return fail(r, a, "to a stage that is not next");
          MS_RETURN_IF_ERROR(need(grad ? 8 : 2, grad ? "its backward" : "its forward"));
          in_transit[Key{grad ? 1 : 0, a.micro_batch, to}] = clock[r] + p2p_seconds;
        } else {
          const PpCosts& costs = chunk_costs[static_cast<size_t>(r)][static_cast<size_t>(a.chunk)];
          double cost = 0;
          if (a.op == PpOp::kForward) {
            if (s > 0) MS_RETURN_IF_ERROR(need(1, "its input arrived"));
            MS_RETURN_IF_ERROR(once(2));
            cost = costs.forward;
          } else if (a.op == PpOp::kBackward || a.op == PpOp::kBackwardInput) {
            MS_RETURN_IF_ERROR(need(2, "its forward"));
            if (s + 1 < S) MS_RETURN_IF_ERROR(need(4, "its gradient arrived"));
            MS_RETURN_IF_ERROR(once(8));
            cost = costs.backward_input;
            if (a.op == PpOp::kBackward) {
              MS_RETURN_IF_ERROR(once(16));
              cost += costs.backward_weight;
            }
          } else {
            MS_RETURN_IF_ERROR(need(8, "its input gradient"));
            MS_RETURN_IF_ERROR(once(16));
            cost = costs.backward_weight;
          }
          clock[r] += cost;
          busy[r] += cost;
          if (a.op != PpOp::kForward) last_backward[static_cast<size_t>(r)] = cost;
        }
        ++pc[r];
        progress = true;
      }
    }
  }
  std::string stuck;
  for (int r = 0; r < pp; ++r) {
    if (pc[r] == ranks[static_cast<size_t>(r)].size()) continue;
    const PpAction& a = ranks[static_cast<size_t>(r)][pc[r]];
    stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " waits in " +
             std::string(pp_op_name(a.op)) + " of micro-batch " + std::to_string(a.micro_batch);
  }
  if (!stuck.empty()) return FailedPrecondition("the pipeline schedule deadlocks: " + stuck);
  for (int r = 0; r < pp; ++r) {
    for (int mb = 0; mb < shape.micro_batches; ++mb) {
      for (int c = 0; c < shape.vpp; ++c) {
        if (done[{r, mb, c}] != ((c * pp + r > 0 ? 1 : 0) | 2 | (c * pp + r + 1 < S ? 4 : 0) | 8 | 16)) {
          return FailedPrecondition("pipeline rank " + std::to_string(r) + " does not run micro-batch " +
                                    std::to_string(mb) + " chunk " + std::to_string(c) +
                                    " through forward and backward exactly once");
        }
      }
    }
  }
  PpSimulation sim;
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  for (int r = 0; r < pp; ++r) sim.bubble += sim.makespan > 0 ? 1.0 - busy[r] / sim.makespan : 0;
  sim.bubble /= pp;
  sim.busy = std::move(busy);
  sim.last_backward = std::move(last_backward);
  return sim;
}

Result<double> pp_theoretical_bubble(const PpScheduleShape& s) {
  MS_RETURN_IF_ERROR(check_pp_schedule(s));
  const double p = s.pp, m = s.micro_batches, v = s.vpp;
  if (s.kind == PpScheduleKind::k1F1B) return (p - 1) / (m + p - 1);
  if (s.kind == PpScheduleKind::kInterleaved) return (p - 1) / (v * m + p - 1);
  std::vector<std::vector<PpAction>> lists;
  for (int r = 0; r < s.pp; ++r) {
    MS_ASSIGN_OR_RETURN(std::vector<PpAction> l, pp_schedule(s, r));
    lists.push_back(std::move(l));
  }
  MS_ASSIGN_OR_RETURN(const PpSimulation sim, simulate_pp(s, lists, {1, 1, 1}));
  return sim.bubble;
}

Result<std::string> describe_pp_schedule(const PpScheduleShape& shape) {
  MS_ASSIGN_OR_RETURN(const double bubble, pp_theoretical_bubble(shape));
  std::string out = "# pipeline schedule " + std::string(pp_schedule_name(shape.kind)) + ": pp " +
                    std::to_string(shape.pp) + ", vpp " + std::to_string(shape.vpp) + ", " +
                    std::to_string(shape.micro_batches) + " micro-batches; ";
  char line[96];
  std::snprintf(line, sizeof(line), "theoretical bubble %.1f%% of the step\n", bubble * 100.0);
  out += line;
  for (int r = 0; r < shape.pp; ++r) {
    MS_ASSIGN_OR_RETURN(const std::vector<PpAction> list, pp_schedule(shape, r));
    out += "pp rank " + std::to_string(r) + ":";
    for (const PpAction& a : list) {
      if (a.op == PpOp::kRecvActivation || a.op == PpOp::kSendActivation ||
          a.op == PpOp::kRecvGrad || a.op == PpOp::kSendGrad) {
        continue;
      }
      out += " " + std::string(pp_op_name(a.op)) + key_name(a.micro_batch, a.chunk, shape.vpp);
    }
    out += "\n";
  }
  return out;
}

int pp_peak_in_flight(const PpScheduleShape& shape, int rank) {
  Result<std::vector<PpAction>> actions = pp_schedule(shape, rank);
  if (!actions.ok()) return 0;
  int now = 0, peak = 0;
  for (const PpAction& a : *actions) {
    if (a.op == PpOp::kForward) peak = std::max(peak, ++now);
    if (a.op == PpOp::kBackward || a.op == PpOp::kBackwardInput) --now;
  }
  return peak;
}

}  // namespace ms::parallel
