// The telemetry and trace record types shared by their writers (ms-train, ms-infer, the
// ms-diagnose simulator) and their readers (ms-diagnose detect, stragglers, trace-export).
// The on-disk form is documented in docs/formats/telemetry.md: JSON lines, one object a line,
// times in seconds since the Unix epoch, sizes in bytes; readers ignore keys they do not know,
// so records can grow without breaking older readers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::telemetry {

// Major version of the telemetry and trace formats. Readers accept files of this version or
// older and refuse newer ones.
inline constexpr int kFormatVersion = 1;

// Every time a reader accepts (t, t0, t1, offset_s) lies within +-kMaxAbsTimeS seconds of the
// epoch (about year 5100): far beyond any real clock, and small enough that differences of
// times stay finite and resolved to tens of microseconds. Readers refuse other values.
inline constexpr double kMaxAbsTimeS = 1e11;

// A rank's coordinates in the pp x dp x cp x tp mesh. cp comes last so that positional
// initializers ({dp, tp, pp}) keep their meaning; files written before it read as cp 0.
struct MeshCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
};

// Seconds one training step spent in each phase.
struct StepPhases {
  double data_s = 0, fwd_s = 0, bwd_s = 0, comm_wait_s = 0, optim_s = 0;
};

// What a trainer reports once per step.
//
// The MoE part is empty for a dense model. For a MoE model it covers every MoE layer of the
// model, in layer order (index 0 = the first MoE layer), and counts are global: summed over the
// ranks that hold distinct tokens (dp, cp; tp ranks see the same tokens and count once) and
// gathered over pipeline stages, so every rank of a run writes the same counts and a reader
// needs only one rank's file. ms-diagnose moe-load summarizes them.
struct StepRecord {
  int64_t step = 0;
  double loss = 0, grad_norm = 0, lr = 0, tokens_per_s = 0, step_s = 0;
  StepPhases phases;
  // [moe layer][expert]: token-to-expert assignments routed to each expert in this step (a
  // token routed to k experts counts once for each), after any capacity limit. Every layer has
  // the same number of experts (model.moe.num_experts).
  std::vector<std::vector<int64_t>> expert_tokens;
  // [moe layer]: assignments dropped by a capacity limit in this step; 0 when dropless. Empty,
  // or one entry per layer of expert_tokens.
  std::vector<int64_t> dropped_tokens;
};

// A "host" record: machine metrics sampled every telemetry.every_s seconds. Network counters are
// cumulative bytes since boot (difference them for rates). `extra` holds every other numeric key
// of the record (mem_total, rss_bytes, GPU metrics, pause frames, ...).
struct HostRecord {
  double t = 0;
  std::string host;
  int rank = 0;
  double cpu_util = 0, mem_used = 0, net_tx_bytes = 0, net_rx_bytes = 0;
  std::map<std::string, double> extra;
  size_t line = 0;  // 1-based line of the file it was read from; 0 when not read from a file
};

// A "step" record as read back, with where and when it was written.
struct StepRecordRead {
  double t = 0;
  std::string host;
  int rank = 0;
  MeshCoord mesh;
  StepRecord step;
  size_t line = 0;  // 1-based line of the file it was read from; 0 when not read from a file
};

// One compute or communication event of a trace. Compute events carry stage/mb/step; comm
// events carry group/seq/bytes. As returned by read_trace_dir, t0/t1 are already shifted to
// rank 0's clock.
struct TraceEvent {
  int rank = 0;
  std::string op;
  bool is_comm = false;
  int stage = -1, mb = -1;
  int64_t step = -1;
  std::string group;
  uint64_t seq = 0;
  uint64_t bytes = 0;
  double t0 = 0, t1 = 0;
  std::string host;  // from the trace's clock record; empty when the writer did not know it
  size_t line = 0;   // 1-based line of the file it was read from; 0 when not read from a file
};

// One JSON line (no trailing newline) for each record kind, as the writers emit them; exposed so
// simulators and tests produce exactly the format the writers do.
std::string host_record_json(const HostRecord& record);
std::string step_record_json(const StepRecordRead& record);
// The first line of a telemetry file: format version and the toolkit that wrote it.
std::string telemetry_meta_json(int rank, const std::string& host, MeshCoord mesh);
// The first line of a trace file: clock offset (local - offset = rank 0 time) and versions.
std::string trace_clock_json(int rank, const std::string& host, double clock_offset_s);
// Event lines; times are the writer's local wall clock.
std::string compute_event_json(int rank, std::string_view op, int stage, int mb, int64_t step,
                               double t0, double t1);
std::string comm_event_json(int rank, std::string_view op, std::string_view group, uint64_t seq,
                            uint64_t bytes, double t0, double t1);

// "<dir>/rank-00003.jsonl".
std::string rank_file_path(const std::string& dir, int rank);

// What counts as one "machine" when comparing: the host (production) or each rank (tests on a
// single host, where every rank shares one host name).
enum class GroupBy { kRank, kHost };
// "rank" or "host"; InvalidArgument naming the accepted values otherwise.
Result<GroupBy> parse_group_by(std::string_view text);
std::string_view group_by_name(GroupBy group_by);
// The machine a record belongs to: its host name, or "rank<N>" when grouping by rank.
std::string group_key(const std::string& host, int rank, GroupBy group_by);
std::string group_key(const HostRecord& record, GroupBy group_by);
std::string group_key(const StepRecordRead& record, GroupBy group_by);
std::string group_key(const TraceEvent& event, GroupBy group_by);

}  // namespace ms::telemetry
