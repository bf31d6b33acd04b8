// Trace -> replay program, and the replay itself; see replay.h for the dependency model.
#include "diag/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

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
      if (!e.is_comm) continue;
      CollectiveTiming& c = out[collective_key(e.group, e.seq)];
      c.last_arrival = std::max(c.last_arrival, e.t0);
      c.completion_sum += e.t1;
      ++c.participants;
    }
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
  double t_begin = std::numeric_limits<double>::infinity();
  for (const auto& events : traces) {
    for (const telemetry::TraceEvent& e : events) t_begin = std::min(t_begin, e.t0);
  }
  ReplayProgram program(traces.size());
  for (size_t r = 0; r < traces.size(); ++r) {
    const int stage = rank_stage(traces[r]);
    double prev_end = t_begin;
    for (const telemetry::TraceEvent& e : traces[r]) {
      ReplayOp op{static_cast<int>(r), e.op, e.is_comm, e.is_comm ? stage : e.stage, e.mb, e.step,
                  e.group, e.seq, e.bytes, std::max(0.0, e.t0 - prev_end), e.t1 - e.t0};
      if (e.is_comm) {
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
      if (op.is_comm) ++out[collective_key(op.group, op.seq)].expected;
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

}  // namespace

Result<ReplayTimes> replay(const ReplayProgram& program, double t_begin) {
  const size_t ranks = program.size();
  ReplayTimes times;
  times.t_begin = times.t_finish = t_begin;
  times.start.resize(ranks);
  times.end.resize(ranks);
  for (size_t r = 0; r < ranks; ++r) {
    times.start[r].assign(program[r].size(), 0.0);
    times.end[r].assign(program[r].size(), 0.0);
  }
  std::map<std::string, Rendezvous> rendezvous = expected_rendezvous(program);
  std::vector<size_t> next(ranks, 0);
  std::vector<double> ready(ranks, t_begin);
  std::vector<bool> waiting(ranks, false);
  size_t remaining = 0;
  for (const auto& ops : program) remaining += ops.size();
  while (remaining > 0) {
    bool progress = false;
    for (size_t r = 0; r < ranks; ++r) {
      while (next[r] < program[r].size() && !waiting[r]) {
        const ReplayOp& op = program[r][next[r]];
        const double start = ready[r] + op.gap_s;
        times.start[r][next[r]] = start;
        progress = true;
        if (!op.is_comm) {
          ready[r] = times.end[r][next[r]] = start + op.duration_s;
          ++next[r];
          --remaining;
          continue;
        }
        Rendezvous& rv = rendezvous[collective_key(op.group, op.seq)];
        rv.arrived.emplace_back(static_cast<int>(r), next[r]);
        rv.last_arrival = std::max(rv.last_arrival, start);
        rv.transfer = std::max(rv.transfer, op.duration_s);
        waiting[r] = true;
        if (static_cast<int>(rv.arrived.size()) < rv.expected) break;
        const double done = rv.last_arrival + rv.transfer;
        for (const auto& [peer, index] : rv.arrived) {
          times.end[peer][index] = ready[peer] = done;
          ++next[peer];
          --remaining;
          waiting[peer] = false;
        }
      }
    }
    if (!progress && remaining > 0) return deadlock_error(program, next);
  }
  for (size_t r = 0; r < ranks; ++r) {
    for (double e : times.end[r]) times.t_finish = std::max(times.t_finish, e);
  }
  return times;
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
