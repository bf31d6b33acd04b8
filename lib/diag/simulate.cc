// Telemetry and trace simulators; see simulate.h for the models and docs/diagnose-detect.md
// for each fault's signature.
#include "diag/simulate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "core/host_metrics.h"
#include "core/philox.h"
#include "diag/replay.h"
#include "io/atomic_file.h"
#include "io/env.h"

namespace ms::diag {
namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr double kBaseCpu = 0.85, kBaseMem = 3.2e10, kBaseNet = 1.5e9, kBaseStep_s = 1.0;

// Draws for one (machine, quantity) stream: normal and uniform at sample k.
class Noise {
 public:
  Noise(uint64_t seed, int machine, std::string_view quantity)
      : seed_(seed), stream_(stream_id("diag.sim." + std::string(quantity) + "." +
                                       std::to_string(machine))) {}
  double normal(uint64_t k) const { return ms::normal(seed_, stream_, 2 * k); }
  double uniform(uint64_t k) const { return ms::uniform(seed_, stream_, 2 * k + 1); }

 private:
  uint64_t seed_, stream_;
};

// The job-wide load at second s: evaluation and checkpoint phases every `period` seconds and
// a slow drift, shared by all machines.
struct Load {
  double cpu = 1, net = 1, step = 1;
};

Load job_load(const JobSimSpec& spec, double s) {
  const Noise shape(spec.seed, -1, "load");
  const double period = 240 + 120 * shape.uniform(0), offset = period * shape.uniform(1);
  const double drift = 0.04 * std::sin(2 * kPi * s / 3600 + 6.28 * shape.uniform(2));
  Load load{1 + drift, 1 + 2 * drift, 1};
  const double phase = std::fmod(s + offset, period);
  const bool checkpoint = static_cast<int>((s + offset) / period) % 2 == 1;
  if (phase < 25) {
    load.cpu *= checkpoint ? 0.8 : 0.6;
    load.net *= checkpoint ? 2.5 : 0.3;
    load.step = checkpoint ? 1.2 : 1.0;
  }
  return load;
}

// One machine's metrics for one sample, before counters are integrated.
struct Sample {
  double cpu = 0, mem = 0, tx_rate = 0, rx_rate = 0, pause_rate = 0;
  bool reporting = true;
};

Sample healthy_sample(const JobSimSpec& spec, int m, uint64_t k, const Load& load) {
  const Noise fixed(spec.seed, m, "machine"), cpu(spec.seed, m, "cpu"), mem(spec.seed, m, "mem"),
      net(spec.seed, m, "net"), pause(spec.seed, m, "pause");
  Sample x;
  x.cpu = kBaseCpu * load.cpu + 0.008 * fixed.normal(0) + 0.02 * cpu.normal(k);
  x.mem = kBaseMem * (1 + 0.003 * fixed.normal(1)) + 2e7 * mem.normal(k);
  const double net_level = kBaseNet * load.net * (1 + 0.01 * fixed.normal(2));
  x.tx_rate = net_level * (1 + 0.03 * net.normal(k));
  x.rx_rate = net_level * (1 + 0.03 * net.normal(k + (1ull << 40)));
  // Rare one-sample glitches on any machine: a descheduled sampler, a burst of traffic.
  if (cpu.uniform(k) < 0.003) x.cpu = 0.25;
  if (net.uniform(k) < 0.003) x.tx_rate *= 2.5;
  if (pause.uniform(k) < 0.003) x.pause_rate = 10 + 50 * pause.normal(k) * pause.normal(k);
  x.cpu = std::clamp(x.cpu, 0.0, 1.0);
  return x;
}

// How much slower the whole job steps at second s because of the fault.
double fault_slowdown(const JobSimSpec& spec, double s) {
  const double a = s - spec.fault_start_s, v = spec.severity;
  if (a < 0) return 1.0;
  switch (spec.fault) {
    case FaultKind::kSlowCpu: return 1 + 0.35 * v;
    case FaultKind::kNicDegrade: return 1 + 0.4 * v;
    case FaultKind::kThermalThrottle: return 1 + 0.15 * v * std::min(1.0, a / 300);
    default: return 1.0;
  }
}

void apply_fault(const JobSimSpec& spec, int m, uint64_t k, double s, Sample& x) {
  const double a = s - spec.fault_start_s;
  if (spec.fault == FaultKind::kNone || a < 0) return;
  const bool faulty = m == spec.fault_machine;
  const double v = spec.severity, slow = fault_slowdown(spec, s);
  const Noise noise(spec.seed, m, "fault");
  switch (spec.fault) {
    case FaultKind::kSlowCpu:  // the slow machine stays busy; the others wait for it
      x.cpu = faulty ? std::min(0.99, x.cpu + (0.97 - x.cpu) * v + 0.01 * noise.normal(k))
                     : x.cpu / slow;
      x.tx_rate /= slow;
      x.rx_rate /= slow;
      break;
    case FaultKind::kNicDegrade:  // pause-frame storms and a throttled link
      x.cpu *= 1 - 0.2 * v;
      x.tx_rate *= 1 - (faulty ? 0.55 : 0.25) * v;
      x.rx_rate *= 1 - (faulty ? 0.5 : 0.25) * v;
      if (faulty && noise.uniform(k) < 0.7) {
        x.pause_rate = 3000 * v * std::exp(0.8 * noise.normal(k));
      }
      break;
    case FaultKind::kMachineStop:  // its process is gone; the rest spin in a collective
      x.reporting = !faulty;
      x.cpu = std::min(1.0, 0.97 + 0.01 * noise.normal(k));
      x.tx_rate = x.rx_rate = 1e4;
      break;
    case FaultKind::kThermalThrottle: {
      if (!faulty) break;
      const double ramp = std::min(1.0, a / 300);
      x.cpu *= 1 - (0.3 * ramp - 0.05 * ramp * std::sin(2 * kPi * a / 45)) * v;
      break;
    }
    case FaultKind::kMemoryLeak:
      if (faulty) x.mem += 3e7 * v * a;
      break;
    case FaultKind::kNone: break;
  }
}

Status validate(const JobSimSpec& spec) {
  if (spec.machines < 1 || spec.ranks_per_machine < 1) {
    return InvalidArgument("--machines and --ranks-per-machine must be >= 1");
  }
  if (!(spec.duration_s > 0) || !(spec.interval_s > 0) || !std::isfinite(spec.duration_s) ||
      !std::isfinite(spec.interval_s)) {
    return InvalidArgument("--duration-s and the record interval must be finite and > 0");
  }
  // Every rank holds a host and a step record per interval: the flags size the whole job's
  // telemetry in memory, so their product is checked before anything is allocated.
  const double records = static_cast<double>(spec.machines) *
                         static_cast<double>(spec.ranks_per_machine) *
                         (spec.duration_s / spec.interval_s + 1);
  MS_RETURN_IF_ERROR(check_memory_need(
      records *
          static_cast<double>(sizeof(telemetry::HostRecord) + sizeof(telemetry::StepRecordRead)),
      "--machines " + std::to_string(spec.machines) + " x --ranks-per-machine " +
          std::to_string(spec.ranks_per_machine) + " over --duration-s " +
          std::to_string(spec.duration_s) + " (the simulated telemetry)"));
  if (spec.fault != FaultKind::kNone &&
      (spec.fault_machine < 0 || spec.fault_machine >= spec.machines)) {
    return InvalidArgument("--fault-machine " + std::to_string(spec.fault_machine) +
                           " is outside 0.." + std::to_string(spec.machines - 1));
  }
  if (!(spec.severity > 0) || spec.severity > 1) {
    return InvalidArgument("--severity must lie in (0, 1]");
  }
  if (spec.fault != FaultKind::kNone &&
      (spec.fault_start_s < 0 || spec.fault_start_s >= spec.duration_s)) {
    return InvalidArgument("--fault-start-s must lie within the job's duration");
  }
  return Status::OK();
}

// Host records of every machine (one vector per machine; ranks copy them).
std::vector<std::vector<telemetry::HostRecord>> host_records(const JobSimSpec& spec) {
  const uint64_t samples = static_cast<uint64_t>(spec.duration_s / spec.interval_s) + 1;
  std::vector<std::vector<telemetry::HostRecord>> out(spec.machines);
  for (int m = 0; m < spec.machines; ++m) {
    const Noise when(spec.seed, m, "time");
    double tx = 1e12 * (1 + when.uniform(0)), rx = 1e12 * (1 + when.uniform(1)), pauses = 0;
    for (uint64_t k = 0; k < samples; ++k) {
      const double s = static_cast<double>(k) * spec.interval_s;
      Sample x = healthy_sample(spec, m, k, job_load(spec, s));
      apply_fault(spec, m, k, s, x);
      if (!x.reporting) break;
      tx += x.tx_rate * spec.interval_s;
      rx += x.rx_rate * spec.interval_s;
      pauses += std::round(x.pause_rate * spec.interval_s);
      telemetry::HostRecord r;
      r.t = spec.start_t + s + 0.02 * when.uniform(k + 2);
      r.host = machine_name(m);
      r.cpu_util = x.cpu;
      r.mem_used = x.mem;
      r.net_tx_bytes = std::round(tx);
      r.net_rx_bytes = std::round(rx);
      r.extra["mem_total"] = 1.28e11;
      r.extra["pfc_pause_frames"] = pauses;
      out[m].push_back(std::move(r));
    }
  }
  return out;
}

// Step records of one rank: every rank steps together; the job stops stepping when a machine
// stops.
std::vector<telemetry::StepRecordRead> step_records(const JobSimSpec& spec, int rank) {
  std::vector<telemetry::StepRecordRead> out;
  const Noise noise(spec.seed, -2, "step");
  const int world = spec.machines * spec.ranks_per_machine;
  double s = 0;
  for (int64_t step = 1;; ++step) {
    const double step_s = kBaseStep_s * job_load(spec, s).step * fault_slowdown(spec, s) *
                          (1 + 0.02 * noise.normal(static_cast<uint64_t>(step)));
    s += step_s;
    if (s > spec.duration_s) break;
    if (spec.fault == FaultKind::kMachineStop && s >= spec.fault_start_s) break;
    telemetry::StepRecordRead r;
    r.t = spec.start_t + s;
    r.rank = rank;
    r.host = machine_name(rank / spec.ranks_per_machine);
    r.mesh.dp = rank;
    r.step.step = step;
    r.step.loss = 1.8 + 2.0 * std::exp(-static_cast<double>(step) / 600) +
                  0.02 * noise.normal(static_cast<uint64_t>(step) + (1ull << 40));
    r.step.grad_norm = 0.8;
    r.step.lr = 3e-4;
    r.step.step_s = step_s;
    r.step.tokens_per_s = 4096.0 * world / step_s;
    r.step.phases = {0.01 * step_s, 0.3 * step_s, 0.55 * step_s, 0.1 * step_s, 0.04 * step_s};
    out.push_back(r);
  }
  return out;
}

}  // namespace

const std::vector<FaultKind>& all_fault_kinds() {
  static const std::vector<FaultKind> kinds = {
      FaultKind::kNone,        FaultKind::kSlowCpu,         FaultKind::kNicDegrade,
      FaultKind::kMachineStop, FaultKind::kThermalThrottle, FaultKind::kMemoryLeak};
  return kinds;
}

std::string_view fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kNone: return "none";
    case FaultKind::kSlowCpu: return "slow-cpu";
    case FaultKind::kNicDegrade: return "nic-degrade";
    case FaultKind::kMachineStop: return "machine-stop";
    case FaultKind::kThermalThrottle: return "thermal-throttle";
    case FaultKind::kMemoryLeak: return "memory-leak";
  }
  return "none";
}

Result<FaultKind> parse_fault_kind(std::string_view name) {
  std::string names;
  for (FaultKind k : all_fault_kinds()) {
    if (fault_kind_name(k) == name) return k;
    names += (names.empty() ? "" : ", ") + std::string(fault_kind_name(k));
  }
  return InvalidArgument("unknown fault '" + std::string(name) + "'; expected one of " + names);
}

std::string machine_name(int machine) {
  char name[16];
  std::snprintf(name, sizeof(name), "node%02d", machine);
  return name;
}

Result<SimulatedJob> simulate_job(const JobSimSpec& spec) {
  MS_RETURN_IF_ERROR(validate(spec));
  SimulatedJob job;
  const auto hosts = host_records(spec);
  for (int m = 0; m < spec.machines; ++m) {
    for (int local = 0; local < spec.ranks_per_machine; ++local) {
      telemetry::RankTelemetry r;
      r.rank = m * spec.ranks_per_machine + local;
      r.host = machine_name(m);
      r.hosts = hosts[m];
      for (telemetry::HostRecord& h : r.hosts) h.rank = r.rank;
      r.steps = step_records(spec, r.rank);
      job.ranks.push_back(std::move(r));
    }
  }
  if (spec.fault != FaultKind::kNone) {
    job.label = {spec.fault, spec.fault_machine, machine_name(spec.fault_machine),
                 spec.start_t + spec.fault_start_s, spec.severity};
  }
  return job;
}

namespace {

// A rank's telemetry file: the meta line, then host and step records in time order.
std::string telemetry_file_text(const telemetry::RankTelemetry& r) {
  std::string text = telemetry::telemetry_meta_json(r.rank, r.host, {r.rank, 0, 0}) + "\n";
  size_t h = 0, s = 0;
  while (h < r.hosts.size() || s < r.steps.size()) {
    const bool host_next =
        s == r.steps.size() || (h < r.hosts.size() && r.hosts[h].t <= r.steps[s].t);
    text += host_next ? telemetry::host_record_json(r.hosts[h++])
                      : telemetry::step_record_json(r.steps[s++]);
    text += "\n";
  }
  return text;
}

Status make_dir(const std::string& dir) {
  return io::default_env().create_dirs(dir);
}

}  // namespace

Status write_job(const SimulatedJob& job, const std::string& dir) {
  const std::string telemetry_dir = dir + "/telemetry";
  MS_RETURN_IF_ERROR(make_dir(telemetry_dir));
  for (const telemetry::RankTelemetry& r : job.ranks) {
    MS_RETURN_IF_ERROR(io::write_file_atomic(telemetry::rank_file_path(telemetry_dir, r.rank),
                                             telemetry_file_text(r)));
  }
  nlohmann::ordered_json labels;
  labels["kind"] = "telemetry";
  labels["fault"] = std::string(fault_kind_name(job.label.fault));
  labels["fault_machine"] = job.label.fault_machine;
  labels["machine"] = job.label.machine;
  labels["fault_start_t"] = job.label.fault_start_t;
  labels["severity"] = job.label.severity;
  return io::write_file_atomic(dir + "/labels.json", labels.dump(2) + "\n");
}

namespace {

// Builds one rank's GPipe program for every step; see simulate_traces.
class PipelineProgramBuilder {
 public:
  PipelineProgramBuilder(const TraceSimSpec& spec, int rank)
      : spec_(spec), rank_(rank), stage_(rank / spec.dp), dp_rank_(rank % spec.dp),
        noise_(spec.seed, rank, "trace") {}

  std::vector<ReplayOp> build() {
    for (int64_t step = 0; step < spec_.steps; ++step) {
      for (int mb = 0; mb < spec_.microbatches; ++mb) forward(step, mb);
      for (int mb = spec_.microbatches - 1; mb >= 0; --mb) backward(step, mb);
      if (spec_.dp > 1) {
        const double bytes = static_cast<double>(spec_.gradient_bytes);
        comm("allreduce", "dp.pp" + std::to_string(stage_), spec_.gradient_bytes,
             2.0 * (spec_.dp - 1) / spec_.dp * bytes / spec_.link_bytes_per_s);
      }
      compute("optim", -1, step, spec_.optim_s);
    }
    return std::move(ops_);
  }

 private:
  std::string pipe_group(int upper_stage) const {
    return "pp." + std::to_string(upper_stage - 1) + "-" + std::to_string(upper_stage) + ".dp" +
           std::to_string(dp_rank_);
  }
  double transfer_s() const {
    return static_cast<double>(spec_.activation_bytes) / spec_.link_bytes_per_s;
  }
  void forward(int64_t step, int mb) {
    if (stage_ > 0) comm("recv", pipe_group(stage_), spec_.activation_bytes, transfer_s());
    compute("fwd", mb, step, spec_.fwd_s);
    if (stage_ < spec_.pp - 1) comm("send", pipe_group(stage_ + 1), spec_.activation_bytes, 0.0);
  }
  void backward(int64_t step, int mb) {
    if (stage_ < spec_.pp - 1) comm("recv", pipe_group(stage_ + 1), spec_.activation_bytes, transfer_s());
    compute("bwd", mb, step, spec_.bwd_s);
    if (stage_ > 0) comm("send", pipe_group(stage_), spec_.activation_bytes, 0.0);
  }
  double jittered(double base) {
    return base * std::max(0.5, 1 + spec_.jitter * noise_.normal(draw_++));
  }
  void compute(const char* op, int mb, int64_t step, double base_s) {
    ReplayOp o;
    o.rank = rank_;
    o.op = op;
    o.stage = stage_;
    o.mb = mb;
    o.step = step;
    const bool slow = rank_ == spec_.slow_rank;
    o.gap_s = jittered(spec_.gap_s) + (slow ? spec_.slow_gap_s : 0.0);
    o.duration_s = jittered(base_s) * (slow ? spec_.slow_factor : 1.0);
    ops_.push_back(std::move(o));
  }
  void comm(const char* op, const std::string& group, uint64_t bytes, double transfer) {
    ReplayOp o;
    o.rank = rank_;
    o.op = op;
    o.is_comm = true;
    o.stage = stage_;
    o.group = group;
    o.seq = seq_[group]++;
    o.bytes = bytes;
    o.gap_s = jittered(spec_.gap_s);
    o.duration_s = jittered(transfer);
    ops_.push_back(std::move(o));
  }

  const TraceSimSpec& spec_;
  const int rank_, stage_, dp_rank_;
  const Noise noise_;
  uint64_t draw_ = 0;
  std::map<std::string, uint64_t> seq_;
  std::vector<ReplayOp> ops_;
};

double clock_offset(const TraceSimSpec& spec, int rank) {
  if (rank == 0) return 0;
  const Noise noise(spec.seed, rank, "clock");
  return spec.max_clock_offset_s * (2 * noise.uniform(0) - 1);
}

}  // namespace

Result<std::vector<std::vector<telemetry::TraceEvent>>> simulate_traces(const TraceSimSpec& spec) {
  if (spec.dp < 1 || spec.pp < 1 || spec.steps < 1 || spec.microbatches < 1) {
    return InvalidArgument("--dp, --pp, --steps and --microbatches must be >= 1");
  }
  if (spec.dp * spec.pp < 2) return InvalidArgument("a trace needs at least 2 ranks (dp x pp)");
  if (spec.slow_rank >= spec.dp * spec.pp) {
    return InvalidArgument("--slow-rank " + std::to_string(spec.slow_rank) + " is outside 0.." +
                           std::to_string(spec.dp * spec.pp - 1));
  }
  if (!(spec.slow_factor > 0)) return InvalidArgument("--slow-factor must be > 0");
  if (!(spec.slow_gap_s >= 0)) return InvalidArgument("--slow-gap-ms must be >= 0");
  ReplayProgram program;
  for (int r = 0; r < spec.dp * spec.pp; ++r) program.push_back(PipelineProgramBuilder(spec, r).build());
  MS_ASSIGN_OR_RETURN(ReplayTimes times, replay(program, spec.start_t));
  return events_from_replay(program, times);
}

Status write_traces(const std::vector<std::vector<telemetry::TraceEvent>>& traces,
                    const TraceSimSpec& spec, const std::string& dir) {
  const std::string trace_dir = dir + "/trace";
  MS_RETURN_IF_ERROR(make_dir(trace_dir));
  for (size_t r = 0; r < traces.size(); ++r) {
    const int rank = static_cast<int>(r);
    const double offset = clock_offset(spec, rank);
    std::string text = telemetry::trace_clock_json(rank, machine_name(rank), offset) + "\n";
    for (const telemetry::TraceEvent& e : traces[r]) {
      text += e.is_comm ? telemetry::comm_event_json(rank, e.op, e.group, e.seq, e.bytes,
                                                     e.t0 + offset, e.t1 + offset)
                        : telemetry::compute_event_json(rank, e.op, e.stage, e.mb, e.step,
                                                        e.t0 + offset, e.t1 + offset);
      text += "\n";
    }
    MS_RETURN_IF_ERROR(io::write_file_atomic(telemetry::rank_file_path(trace_dir, rank), text));
  }
  nlohmann::ordered_json labels = {{"kind", "traces"},        {"dp", spec.dp},
                                   {"pp", spec.pp},           {"steps", spec.steps},
                                   {"microbatches", spec.microbatches},
                                   {"slow_rank", spec.slow_rank}, {"slow_factor", spec.slow_factor},
                                   {"slow_gap_s", spec.slow_gap_s},
                                   {"seed", spec.seed}};
  return io::write_file_atomic(dir + "/trace-labels.json", labels.dump(2) + "\n");
}

}  // namespace ms::diag
