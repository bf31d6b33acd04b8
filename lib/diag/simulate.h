// Simulated jobs for testing and scoring the diagnosis tools before (and besides) real training
// runs: multi-machine telemetry with one labelled injected fault, and per-rank traces of a
// dp x pp job with one slowed worker. All randomness comes from Philox keyed by the seed, so a
// (spec, seed) pair always produces the same job.
//
// Telemetry model, per machine and second: a job-wide load pattern shared by every machine
// (periodic evaluation/checkpoint phases with less compute and more network), a slow drift, a
// small fixed per-machine offset, Gaussian jitter, and rare one-sample spikes on healthy
// machines. Faults change the faulty machine from fault_start_s on (docs/diagnose-detect.md
// lists each signature); every rank also writes one step record per training step, whose step
// time reflects the fault's slowdown of the whole job.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "telemetry/reader.h"

namespace ms::diag {

enum class FaultKind { kNone, kSlowCpu, kNicDegrade, kMachineStop, kThermalThrottle, kMemoryLeak };

// All kinds, healthy first.
const std::vector<FaultKind>& all_fault_kinds();
// "none", "slow-cpu", "nic-degrade", "machine-stop", "thermal-throttle", "memory-leak".
std::string_view fault_kind_name(FaultKind kind);
// InvalidArgument listing the accepted names otherwise.
Result<FaultKind> parse_fault_kind(std::string_view name);

struct JobSimSpec {
  int machines = 8;
  int ranks_per_machine = 1;
  double duration_s = 1800;
  double interval_s = 1;  // host record period
  double start_t = 1764480000.0;
  FaultKind fault = FaultKind::kNone;
  int fault_machine = 3;
  double fault_start_s = 600;
  // Scales the fault's signature: 1 is the full signature of docs/diagnose-detect.md, 0.1 a
  // tenth of it (a 3.5% slower CPU instead of 35%).
  double severity = 1.0;
  uint64_t seed = 1;
};

// What was injected, for scoring.
struct JobLabel {
  FaultKind fault = FaultKind::kNone;
  int fault_machine = -1;  // -1 when healthy
  std::string machine;     // its host name ("node03"); empty when healthy
  double fault_start_t = 0;
  double severity = 0;
};

struct SimulatedJob {
  std::vector<telemetry::RankTelemetry> ranks;  // ordered by rank; rank = machine * rpm + local
  JobLabel label;
};

// InvalidArgument when the spec is impossible (fewer than 1 machine, fault machine out of
// range, fault start outside the job, non-positive duration or interval).
Result<SimulatedJob> simulate_job(const JobSimSpec& spec);

// Host name of machine m: "node00", "node01", ...
std::string machine_name(int machine);

// Writes <dir>/telemetry/rank-NNNNN.jsonl (telemetry format) and <dir>/labels.json, each
// atomically; IOError naming the path on failure.
Status write_job(const SimulatedJob& job, const std::string& dir);

struct TraceSimSpec {
  int dp = 2, pp = 2;
  int steps = 6, microbatches = 4;
  int slow_rank = -1;  // -1: none
  double slow_factor = 1.5;
  double slow_gap_s = 0;  // extra host idle before each compute op of slow_rank (a stalled host)
  double fwd_s = 0.020, bwd_s = 0.040, optim_s = 0.010, gap_s = 0.0005;
  double jitter = 0.03;  // relative standard deviation of every duration
  uint64_t activation_bytes = 8u << 20, gradient_bytes = 64u << 20;
  double link_bytes_per_s = 10e9;
  double start_t = 1764480000.0;
  double max_clock_offset_s = 0.25;  // each rank's clock is off by up to this much
  uint64_t seed = 1;
};

// Per-rank traces of a GPipe schedule on a pp x dp mesh (rank = pp_rank * dp + dp_rank): per
// micro-batch recv / fwd / send down the pipeline, then recv / bwd / send back up, then an
// allreduce of gradients over each stage's dp group and an optimizer step. Sends are
// nonblocking, as the trainer's (t0 = t1 = the post time; the recv waits for the transfer,
// replay.h). Compute of `slow_rank` takes `slow_factor` times longer. Times are on rank 0's clock. Groups are named
// "pp.<a>-<b>.dp<d>" and "dp.pp<p>". InvalidArgument for an impossible spec.
Result<std::vector<std::vector<telemetry::TraceEvent>>> simulate_traces(const TraceSimSpec& spec);

// Writes <dir>/trace/rank-NNNNN.jsonl (each rank's clock shifted by a seeded offset recorded in
// its clock line, as a real trace writer would) and <dir>/labels.json.
Status write_traces(const std::vector<std::vector<telemetry::TraceEvent>>& traces,
                    const TraceSimSpec& spec, const std::string& dir);

}  // namespace ms::diag
