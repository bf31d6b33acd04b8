// Trace -> replay program, and the replay itself; see replay.h for the dependency model.
#include "diag/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "diag/robust_stats.h"

namespace ms::diag {
namespace {

std::string collective_key(const std::string& group, uint64_t seq) {
  return group + "#" + std::to_string(seq);
}

// The stage a rank runs: the most frequent stage among its compute events (-1 when none).
int rank_stage(const std::vector<telemetry::TraceEvent>& events) {
  std::map<int, int> counts;
  for (const telemetry::TraceEvent& e : events) {
    if (!e.is_comm) ++counts[e.stage];
  }
  int best = -1, best_count = 0;
  for (const auto& [stage, count] : counts) {
    if (count > best_count) {
      best = stage;
      best_count = count;
    }
  }
  return best;
}

// Per collective: last arrival and mean completion over its participants.
struct CollectiveTiming {
  double last_arrival = -std::numeric_limits<double>::infinity();
  double completion_sum = 0;
  int participants = 0;
};

std::map<std::string, CollectiveTiming> collective_timings(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  std::map<std::string, CollectiveTiming> out;
  for (const auto& events : traces) {
    for (const telemetry::TraceEvent& e : events) {
      if (!e.is_comm || is_pipeline_p2p(e.is_comm, e.op, e.group)) continue;
      CollectiveTiming& c = out[collective_key(e.group, e.seq)];
      c.last_arrival = std::max(c.last_arrival, e.t0);
      c.completion_sum += e.t1;
      ++c.participants;
    }
  }
  return out;
}

// occurrence[r][i]: for a pipeline send or recv, how many earlier events of rank r had its op,
// group and seq (0 for every other event).
std::vector<std::vector<uint64_t>> p2p_occurrences(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  std::vector<std::vector<uint64_t>> out(traces.size());
  for (size_t r = 0; r < traces.size(); ++r) {
    std::map<std::string, uint64_t> seen;
    for (const telemetry::TraceEvent& e : traces[r]) {
      const bool p2p = is_pipeline_p2p(e.is_comm, e.op, e.group);
      out[r].push_back(p2p ? seen[e.op + "|" + collective_key(e.group, e.seq)]++ : 0);
    }
  }
  return out;
}

// One end of a pipeline message as measured.
struct P2pEnd {
  int rank = -1;
  double t0 = 0, t1 = 0;
  uint64_t bytes = 0;
};
struct P2pPair {
  std::string group;
  uint64_t seq = 0, occurrence = 0;
  P2pEnd send, recv;
};

std::string p2p_key(const std::string& group, uint64_t seq, uint64_t occurrence) {
  return collective_key(group, seq) + "#" + std::to_string(occurrence);
}

// "trace pipeline recv of group pp.dp0 seq 5 (occurrence 1 on rank 2) has no matching send".
Status p2p_peer_error(const P2pPair& p, const std::string& op, int rank, const std::string& what) {
  return Corruption("trace pipeline " + op + " of group " + p.group + " seq " +
                    std::to_string(p.seq) + " (occurrence " + std::to_string(p.occurrence) +
                    " on rank " + std::to_string(rank) + ") " + what +
                    " (are some rank files missing or from another run?)");
}

// Pairs every pipeline send with its recv; Corruption naming group and seq for an unpaired or
// doubled end.
Result<std::map<std::string, P2pPair>> p2p_pairs(
    const std::vector<std::vector<telemetry::TraceEvent>>& traces,
    const std::vector<std::vector<uint64_t>>& occurrences) {
  std::map<std::string, P2pPair> pairs;
  for (size_t r = 0; r < traces.size(); ++r) {
    for (size_t i = 0; i < traces[r].size(); ++i) {
      const telemetry::TraceEvent& e = traces[r][i];
      if (!is_pipeline_p2p(e.is_comm, e.op, e.group)) continue;
      P2pPair& p = pairs[p2p_key(e.group, e.seq, occurrences[r][i])];
      p.group = e.group;
      p.seq = e.seq;
      p.occurrence = occurrences[r][i];
      P2pEnd& end = e.op == "send" ? p.send : p.recv;
      if (end.rank >= 0) {
        return p2p_peer_error(p, e.op, end.rank, "appears again on rank " + std::to_string(r));
      }
      end = P2pEnd{static_cast<int>(r), e.t0, e.t1, e.bytes};
    }
  }
  for (const auto& [key, p] : pairs) {
    if (p.send.rank < 0) return p2p_peer_error(p, "recv", p.recv.rank, "has no matching send");
    if (p.recv.rank < 0) return p2p_peer_error(p, "send", p.send.rank, "has no matching recv");
  }
  return pairs;
}

// Transfer time of every pipeline message (see build_program in replay.h for the rule).
std::map<std::string, double> p2p_transfers(const std::map<std::string, P2pPair>& pairs) {
  std::map<uint64_t, std::vector<double>> waited_by_size;
  std::vector<double> waited_all;
  auto waited = [](const P2pPair& p) { return p.recv.t1 - p.recv.t0 > kRecvWaitedS; };
  for (const auto& [key, p] : pairs) {
    if (!waited(p)) continue;
    const double transfer = std::max(0.0, p.recv.t1 - p.send.t0);
    waited_by_size[p.recv.bytes].push_back(transfer);
    waited_all.push_back(transfer);
  }
  std::map<std::string, double> out;
  for (const auto& [key, p] : pairs) {
    if (waited(p)) {
      out[key] = std::max(0.0, p.recv.t1 - p.send.t0);
      continue;
    }
    const auto same_size = waited_by_size.find(p.recv.bytes);
    const double typical = same_size != waited_by_size.end() ? median(same_size->second)
                                                            : median(waited_all);
    out[key] = std::clamp(typical, 0.0, std::max(0.0, p.recv.t0 - p.send.t0));
  }
  return out;
}

// Step of each comm op: the step of the closest compute before it (or after it, at the start).
void assign_comm_steps(std::vector<ReplayOp>& ops) {
  int64_t current = -1;
  for (const ReplayOp& op : ops) {
    if (!op.is_comm) {
      current = op.step;
      break;
    }
  }
  for (ReplayOp& op : ops) {
    if (op.is_comm) {
      op.step = current;
    } else {
      current = op.step;
    }
  }
}

}  // namespace

std::string group_kind(const std::string& group) { return group.substr(0, group.find('.')); }

bool is_pipeline_p2p(bool is_comm, const std::string& op, const std::string& group) {
  return is_comm && (op == "send" || op == "recv") && group_kind(group) == "pp";
}

bool is_pipeline_p2p(const ReplayOp& op) { return is_pipeline_p2p(op.is_comm, op.op, op.group); }

std::string comm_key(const ReplayOp& op) {
  return is_pipeline_p2p(op) ? p2p_key(op.group, op.seq, op.occurrence)
                             : collective_key(op.group, op.seq);
}

double measured_makespan(const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const auto& events : traces) {
    for (const telemetry::TraceEvent& e : events) {
      first = std::min(first, e.t0);
      last = std::max(last, e.t1);
    }
  }
  return last > first ? last - first : 0.0;
}

Result<ReplayProgram> build_program(const std::vector<std::vector<telemetry::TraceEvent>>& traces) {
  const std::map<std::string, CollectiveTiming> timings = collective_timings(traces);
  for (const auto& [key, timing] : timings) {
    if (timing.participants < 2) {
      return Corruption("trace communication " + key +
                        " (group#seq) appears on one rank only; a collective or send/recv needs "
                        "its peers' events (are some rank files from another run?)");
    }
  }
  const std::vector<std::vector<uint64_t>> occurrences = p2p_occurrences(traces);
  MS_ASSIGN_OR_RETURN(const auto pairs, p2p_pairs(traces, occurrences));
  const std::map<std::string, double> transfers = p2p_transfers(pairs);
  double t_begin = std::numeric_limits<double>::infinity();
  for (const auto& events : traces) {
    for (const telemetry::TraceEvent& e : events) t_begin = std::min(t_begin, e.t0);
  }
  ReplayProgram program(traces.size());
  for (size_t r = 0; r < traces.size(); ++r) {
    const int stage = rank_stage(traces[r]);
    double prev_end = t_begin;
    for (size_t i = 0; i < traces[r].size(); ++i) {
      const telemetry::TraceEvent& e = traces[r][i];
      ReplayOp op{static_cast<int>(r), e.op, e.is_comm, e.is_comm ? stage : e.stage, e.mb, e.step,
                  e.group, e.seq, e.bytes, std::max(0.0, e.t0 - prev_end), e.t1 - e.t0,
                  occurrences[r][i]};
      if (is_pipeline_p2p(op)) {
        if (op.op == "recv") op.duration_s = transfers.at(comm_key(op));
      } else if (e.is_comm) {
        const CollectiveTiming& c = timings.at(collective_key(e.group, e.seq));
        op.duration_s = std::max(0.0, c.completion_sum / c.participants - c.last_arrival);
      }
      op.duration_s = std::max(0.0, op.duration_s);
      prev_end = std::max(prev_end, e.t1);
      program[r].push_back(std::move(op));
    }
    assign_comm_steps(program[r]);
  }
  return program;
}

namespace {

// Arrivals at one collective during a replay.
struct Rendezvous {
  int expected = 0;
  std::vector<std::pair<int, size_t>> arrived;  // (rank, op index)
  double last_arrival = -std::numeric_limits<double>::infinity();
  double transfer = 0;
};

std::map<std::string, Rendezvous> expected_rendezvous(const ReplayProgram& program) {
  std::map<std::string, Rendezvous> out;
  for (const auto& ops : program) {
    for (const ReplayOp& op : ops) {
      if (op.is_comm && !is_pipeline_p2p(op)) ++out[collective_key(op.group, op.seq)].expected;
    }
  }
  return out;
}

Status deadlock_error(const ReplayProgram& program, const std::vector<size_t>& next) {
  std::string waiting;
  for (size_t r = 0; r < program.size() && waiting.size() < 400; ++r) {
    if (next[r] >= program[r].size()) continue;
    const ReplayOp& op = program[r][next[r]];
    waiting += " rank " + std::to_string(r) + " in " + op.op + " " +
               collective_key(op.group, op.seq) + ";";
  }
  return Corruption("the trace's dependencies cannot be met: ranks wait forever (a peer's "
                    "matching event is missing):" + waiting);
}

// The state of a replay in progress: per rank its next op, when it is free, and whether it
// waits; pipeline sends posted so far and recvs waiting for theirs.
class Replayer {
 public:
  Replayer(const ReplayProgram& program, double t_begin)
      : program_(program), next_(program.size(), 0), ready_(program.size(), t_begin),
        waiting_(program.size(), false), rendezvous_(expected_rendezvous(program)) {
    times_.t_begin = times_.t_finish = t_begin;
    times_.start.resize(program.size());
    times_.end.resize(program.size());
    for (size_t r = 0; r < program.size(); ++r) {
      times_.start[r].assign(program[r].size(), 0.0);
      times_.end[r].assign(program[r].size(), 0.0);
      remaining_ += program[r].size();
    }
  }

  Result<ReplayTimes> run() {
    while (remaining_ > 0) {
      bool progress = false;
      for (size_t r = 0; r < program_.size(); ++r) {
        while (next_[r] < program_[r].size() && !waiting_[r]) {
          progress = true;
          start_next(r);
        }
      }
      if (!progress) return deadlock_error(program_, next_);
    }
    for (const auto& ends : times_.end) {
      for (double e : ends) times_.t_finish = std::max(times_.t_finish, e);
    }
    return std::move(times_);
  }

 private:
  void start_next(size_t r) {
    const ReplayOp& op = program_[r][next_[r]];
    const double start = ready_[r] + op.gap_s;
    times_.start[r][next_[r]] = start;
    if (!op.is_comm) {
      finish(r, start + op.duration_s);
    } else if (!is_pipeline_p2p(op)) {
      arrive_at_collective(r, op, start);
    } else if (op.op == "send") {
      post_send(r, op, start);
    } else {
      arrive_at_recv(r, op, start);
    }
  }

  void finish(size_t r, double end) {
    times_.end[r][next_[r]] = ready_[r] = end;
    ++next_[r];
    --remaining_;
    waiting_[r] = false;
  }

  void arrive_at_collective(size_t r, const ReplayOp& op, double start) {
    Rendezvous& rv = rendezvous_[collective_key(op.group, op.seq)];
    rv.arrived.emplace_back(static_cast<int>(r), next_[r]);
    rv.last_arrival = std::max(rv.last_arrival, start);
    rv.transfer = std::max(rv.transfer, op.duration_s);
    waiting_[r] = true;
    if (static_cast<int>(rv.arrived.size()) < rv.expected) return;
    const double done = rv.last_arrival + rv.transfer;
    for (const auto& arrival : rv.arrived) finish(static_cast<size_t>(arrival.first), done);
  }

  // The sender goes on at once; a recv already waiting for this message completes when the
  // message lands.
  void post_send(size_t r, const ReplayOp& op, double start) {
    const std::string key = comm_key(op);
    posted_[key] = start;
    finish(r, start + op.duration_s);
    const auto waiting = waiting_recv_.find(key);
    if (waiting == waiting_recv_.end()) return;
    const size_t peer = waiting->second;
    waiting_recv_.erase(waiting);
    const ReplayOp& recv = program_[peer][next_[peer]];
    finish(peer, std::max(times_.start[peer][next_[peer]], start + recv.duration_s));
  }

  void arrive_at_recv(size_t r, const ReplayOp& op, double start) {
    const std::string key = comm_key(op);
    const auto send = posted_.find(key);
    if (send != posted_.end()) {
      finish(r, std::max(start, send->second + op.duration_s));
      return;
    }
    waiting_recv_[key] = r;
    waiting_[r] = true;
  }

  const ReplayProgram& program_;
  ReplayTimes times_;
  std::vector<size_t> next_;
  std::vector<double> ready_;
  std::vector<bool> waiting_;
  std::map<std::string, Rendezvous> rendezvous_;
  std::map<std::string, double> posted_;         // pipeline send key -> post time
  std::map<std::string, size_t> waiting_recv_;   // pipeline send key -> waiting rank
  size_t remaining_ = 0;
};

}  // namespace

Result<ReplayTimes> replay(const ReplayProgram& program, double t_begin) {
  return Replayer(program, t_begin).run();
}

std::vector<std::vector<telemetry::TraceEvent>> events_from_replay(const ReplayProgram& program,
                                                                   const ReplayTimes& times) {
  std::vector<std::vector<telemetry::TraceEvent>> out(program.size());
  for (size_t r = 0; r < program.size(); ++r) {
    for (size_t i = 0; i < program[r].size(); ++i) {
      const ReplayOp& op = program[r][i];
      telemetry::TraceEvent e;
      e.rank = op.rank;
      e.op = op.op;
      e.is_comm = op.is_comm;
      if (op.is_comm) {
        e.group = op.group;
        e.seq = op.seq;
        e.bytes = op.bytes;
      } else {
        e.stage = op.stage;
        e.mb = op.mb;
        e.step = op.step;
      }
      e.t0 = times.start[r][i];
      e.t1 = times.end[r][i];
      out[r].push_back(std::move(e));
    }
  }
  return out;
}

}  // namespace ms::diag
