// The dependency-graph replay behind the straggler what-if analysis (Lin et al., "Understanding
// Stragglers in Large Model Training Using What-if Analysis", OSDI 2025). A trace becomes a
// program: per rank, its operations in program order, each with the idle gap before it and its
// duration. Replaying the program recomputes every start and end time from these dependencies:
//   - program order: an operation starts `gap_s` after the previous one on its rank ends;
//   - collectives: the operations sharing (group, seq) on different ranks complete together,
//     `duration_s` (the transfer time) after the last participant arrives;
//   - pipeline point-to-point (a "send" or "recv" of a group of kind "pp"): the send is
//     nonblocking: posted at its start, it costs the sender only its own duration (0 in traces:
//     the trainer writes t0 = t1 = the post time) and the sender never waits for it. Its recv
//     completes at max(the receiver's arrival at the wait, the send's post + the transfer time
//     held in the recv's `duration_s`). A send and its recv share (group, seq); the same pair
//     may recur every step, so the n-th send of (group, seq) on a rank pairs with the n-th recv
//     of (group, seq) on its peer (`occurrence`);
//   - any other send/recv is a two-party collective: the later arrival starts the transfer.
// Changing durations and replaying answers "how long would the job have taken if ...".
// One stream per rank is assumed: events of a rank do not overlap (overlapping ones are
// serialized, with a zero gap).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "telemetry/schema.h"

namespace ms::diag {

struct ReplayOp {
  int rank = 0;
  std::string op;
  bool is_comm = false;
  int stage = -1;      // compute: its stage; comm: the rank's stage
  int mb = -1;
  int64_t step = -1;   // comm: the step of the compute before it on the rank
  std::string group;   // comm only
  uint64_t seq = 0;    // comm only
  uint64_t bytes = 0;  // comm only
  double gap_s = 0;       // idle time between the previous op's end on the rank and this start
  double duration_s = 0;  // compute: run time; collective: transfer after the last arrival;
                          // pp send: the sender's own cost (0); pp recv: the transfer time
  uint64_t occurrence = 0;  // pp send/recv: earlier ops of its rank with this op, group, seq
};

// True for the nonblocking pipeline point-to-point ops: a "send" or "recv" in a group whose
// kind (group_kind) is "pp".
bool is_pipeline_p2p(bool is_comm, const std::string& op, const std::string& group);
bool is_pipeline_p2p(const ReplayOp& op);

// The key that pairs a comm op with its peers: "group#seq" for collectives, and
// "group#seq#occurrence" for pipeline sends and recvs.
std::string comm_key(const ReplayOp& op);

// Per rank, operations in program order.
using ReplayProgram = std::vector<std::vector<ReplayOp>>;

struct ReplayTimes {
  std::vector<std::vector<double>> start, end;  // [rank][op]
  double t_begin = 0, t_finish = 0;
  double makespan() const { return t_finish - t_begin; }
};

// Builds the program of measured traces (element r: rank r's events, t0-sorted, on rank 0's
// clock): gaps from consecutive events, compute durations as measured, and each collective's
// transfer time as (mean completion over participants) - (last arrival).
// Pipeline recvs get the transfer time of their message: for a recv that waited (t1 > t0 +
// kRecvWaitedS), recv t1 - send t0, which is exactly the time the message took to land after
// it was posted (the recv returned when it landed); for a recv that found its message already
// there, only the bound transfer <= recv t0 - send t0 is known, so it gets the median over
// waited recvs of its size (of any size when none), capped at that bound. Both rules are
// clipped at 0 (clock offsets) and replay the measured trace exactly.
// Corruption naming the group and seq when a collective has a single participant, or when a
// pipeline send or recv has no peer (or two).
inline constexpr double kRecvWaitedS = 1e-6;
Result<ReplayProgram> build_program(const std::vector<std::vector<telemetry::TraceEvent>>& traces);

// Replays `program` from time `t_begin`. Corruption naming the waiting ranks, group and seq
// when the dependencies can never be met (events missing from some rank's trace).
Result<ReplayTimes> replay(const ReplayProgram& program, double t_begin);

// The measured span of a trace: last t1 minus first t0 over all ranks.
double measured_makespan(const std::vector<std::vector<telemetry::TraceEvent>>& traces);

// Trace events carrying the replayed times of `program` (compute with stage/mb/step, comm
// with group/seq/bytes), as a trace reader would return them.
std::vector<std::vector<telemetry::TraceEvent>> events_from_replay(const ReplayProgram& program,
                                                                   const ReplayTimes& times);

// "dp.pp1" -> "dp": the kind of a communication group (its name up to the first '.').
std::string group_kind(const std::string& group);

}  // namespace ms::diag
