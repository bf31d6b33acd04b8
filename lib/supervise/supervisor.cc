#include "supervise/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/logging.h"
#include "core/timer.h"
#include "diag/detect.h"
#include "diag/hang.h"
#include "diag/robust_stats.h"
#include "io/atomic_file.h"
#include "io/directory_lock.h"
#include "supervise/ettr.h"
#include "supervise/event_log.h"
#include "supervise/job_command.h"
#include "supervise/job_output.h"
#include "supervise/job_process.h"
#include "supervise/live_telemetry.h"
#include "supervise/machines.h"
#include "train/fault_injection.h"
#include "train/run_dir.h"

namespace ms::supervise {
namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::atomic<int> g_signal{0};
extern "C" void on_supervisor_signal(int signal) { g_signal.store(signal); }

void install_signal_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_supervisor_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

std::string join(const std::vector<int>& values) {
  std::string text;
  for (int v : values) text += (text.empty() ? "" : ",") + std::to_string(v);
  return text;
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1fs", s);
  return text;
}

// Telemetry lines passed over that are logged: a bad line or two is news, thousands are noise.
constexpr int kSkippedLinesShown = 10;

// Steps each machine must have completed within the detection window before it is called slow.
constexpr size_t kMinSlowSteps = 3;

// The median step compute (diag::step_compute_s) of every machine over the steps its ranks
// completed in `ranks` (the window's records), for the machines with at least `min_steps` of
// them. Completed steps only: detect's grid holds each rank's last step until its next one, so
// a job that has stalled (a hang, before the hang timeout) would turn one step's jitter into a
// lasting slowdown there.
std::map<std::string, double> recent_step_compute(
    const std::vector<telemetry::RankTelemetry>& ranks, telemetry::GroupBy group_by,
    size_t min_steps) {
  std::map<std::string, std::vector<double>> samples;
  for (const telemetry::RankTelemetry& r : ranks) {
    for (const telemetry::StepRecordRead& s : r.steps) {
      samples[telemetry::group_key(s, group_by)].push_back(diag::step_compute_s(s.step.phases));
    }
  }
  std::map<std::string, double> out;
  for (const auto& [machine, values] : samples) {
    if (values.size() >= min_steps) out[machine] = diag::median(values);
  }
  return out;
}

// How an attempt ended.
struct AttemptEnd {
  bool completed = false;     // every step done and the job exited 0
  bool interrupted = false;   // the supervisor itself was asked to stop
  std::optional<Incident> incident;
  int rank = -1;  // the world rank the incident names, -1: none
  int exit_status = 0;
  json evidence = json::object();
  double detected_t = 0;
  double fault_t = 0;  // when it began, if known better than the last progress (detect's)
};

class Supervisor {
 public:
  Supervisor(SuperviseOptions options, JobCommand job, config::RunConfig config, MachinePool pool)
      : options_(std::move(options)),
        job_(std::move(job)),
        config_(std::move(config)),
        pool_(std::move(pool)),
        policy_(options_.policy),
        telemetry_(config_.run.dir + "/telemetry") {}

  Result<int> run();

 private:
  Status launch(int attempt);
  Result<AttemptEnd> watch(int attempt);
  Status take_steps(int attempt);
  AttemptEnd exited(int status);
  std::optional<AttemptEnd> check_hang(double now);
  std::optional<AttemptEnd> check_detect(double now);
  int machine_of_rank(int rank) const;
  // The oldest telemetry detection looks at: two windows and a period back, in this attempt.
  double detect_horizon(double now) const {
    return std::max(attempt_t0_, now - 2 * options_.detect_window_s - options_.detect_period_s);
  }
  std::string machine_name(int machine) const;
  Status keep_evidence(int incident_no, const AttemptEnd& end);
  Result<int> finish(const std::string& outcome, const std::string& reason);

  SuperviseOptions options_;
  JobCommand job_;
  config::RunConfig config_;
  MachinePool pool_;
  RecoveryPolicy policy_;
  LiveTelemetry telemetry_;
  std::unique_ptr<EventLog> events_;
  std::unique_ptr<JobProcess> process_;
  std::string state_dir_;
  double t_begin_ = 0;
  // The current attempt.
  std::vector<int> slots_;  // pool slot of every world rank
  double attempt_t0_ = 0, last_progress_t_ = 0, last_detect_t_ = 0;
  int64_t last_step_ = 0;
  bool stepped_ = false;  // the attempt has completed a step
  std::map<int, double> heartbeat_;  // rank -> its latest step record's time
  int skipped_lines_ = 0;  // telemetry lines passed over, over the whole run
  std::vector<StepTiming> steps_;
  std::vector<IncidentTiming> incidents_;
  std::vector<std::string> incident_kinds_;
};

int Supervisor::machine_of_rank(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(slots_.size())) return -1;
  return pool_.machine_of_slot(slots_[static_cast<size_t>(rank)]);
}

std::string Supervisor::machine_name(int machine) const {
  return machine < 0 ? "" : pool_.machines()[static_cast<size_t>(machine)].name;
}

Status Supervisor::launch(int attempt) {
  MS_ASSIGN_OR_RETURN(const int np, choose_world_size(config_, pool_.slots_in_use()));
  slots_ = pool_.rank_slots(np);
  const std::string hostfile = state_dir_ + "/hostfile";
  MS_RETURN_IF_ERROR(io::write_file_atomic(hostfile, pool_.hostfile_text()));
  MS_RETURN_IF_ERROR(io::write_file_atomic(state_dir_ + "/excluded", pool_.excluded_text()));
  // Reports of an earlier attempt's hang would name its ranks, not this one's.
  std::error_code ec;
  fs::remove_all(config_.run.dir + "/inflight", ec);
  char watchdog[64];
  std::snprintf(watchdog, sizeof(watchdog), "telemetry.watchdog_s=%g", options_.hang_timeout_s / 2);
  std::vector<std::string> sets = {watchdog};
  if (attempt > 1) sets.push_back("checkpoint.resume=auto");
  const std::vector<std::string> argv = render_job_command(job_, np, hostfile, sets);
  std::vector<std::string> in_use;
  for (const Machine& m : pool_.machines()) {
    if (!m.removed) in_use.push_back(m.name);
  }
  MS_RETURN_IF_ERROR(events_->write(attempt == 1 ? "start" : "restart",
                                    {{"attempt", attempt},
                                     {"ranks", np},
                                     {"machines", in_use},
                                     {"slots", slots_},
                                     {"command", shell_line(argv)}}));
  MS_LOG(Info) << "supervise: attempt " << attempt << ": " << np << " ranks on "
               << in_use.size() << " machine(s): " << shell_line(argv);
  attempt_t0_ = wall_time_s();
  last_progress_t_ = attempt_t0_;
  last_detect_t_ = attempt_t0_;
  stepped_ = false;
  heartbeat_.clear();
  MS_ASSIGN_OR_RETURN(process_, JobProcess::start(
                                    argv,
                                    {{train::kSlotsEnv, join(slots_)},
                                     {"MS_SUPERVISE_ATTEMPT", std::to_string(attempt)}},
                                    state_dir_ + "/attempt-" + std::to_string(attempt) + ".log",
                                    options_.echo));
  return Status::OK();
}

// Heartbeats and rank 0's completed steps from what the telemetry gained.
Status Supervisor::take_steps(int attempt) {
  Result<std::vector<telemetry::StepRecordRead>> fresh = telemetry_.poll();
  for (const std::string& line : telemetry_.skipped()) {
    if (++skipped_lines_ <= kSkippedLinesShown) {
      MS_LOG(Warn) << "supervise: passed over a telemetry line: " << line
                   << (skipped_lines_ == kSkippedLinesShown ? " (more are not shown)" : "");
    }
  }
  if (!fresh.ok()) {
    MS_LOG(Warn) << "supervise: reading the telemetry: " << fresh.status().message();
    return Status::OK();
  }
  for (const telemetry::StepRecordRead& r : *fresh) {
    if (r.t < attempt_t0_) continue;  // an earlier run's
    heartbeat_[r.rank] = std::max(heartbeat_[r.rank], r.t);
    if (r.rank != 0) continue;
    steps_.push_back({attempt, r.step.step, r.t, r.step.step_s});
    last_step_ = r.step.step;
    last_progress_t_ = std::max(last_progress_t_, r.t);
    stepped_ = true;
  }
  return Status::OK();
}

// The launcher exited with `status`.
AttemptEnd Supervisor::exited(int status) {
  AttemptEnd end;
  end.exit_status = status;
  end.detected_t = wall_time_s();
  const std::string output = process_->output();
  if (status == 0) {
    end.completed = last_step_ >= config_.train.steps;
    if (!end.completed) {
      end.incident = Incident{FaultKind::kCrash, last_step_ + 1, -1, "", 0,
                              "the job exited 0 after step " + std::to_string(last_step_) +
                                  " of " + std::to_string(config_.train.steps)};
    }
    return end;
  }
  if (const std::optional<NumericalFault> nan = numerical_fault_in_output(output)) {
    end.rank = nan->rank;
    const int machine = machine_of_rank(nan->rank);
    end.incident = Incident{FaultKind::kNumerical, nan->step, machine, machine_name(machine),
                            machine >= 0 ? 1 : 0, nan->line};
    end.evidence["line"] = nan->line;
    return end;
  }
  const std::optional<FailedRank> failed = failed_rank_in_output(output);
  const int machine = failed ? machine_of_rank(failed->rank) : -1;
  end.rank = failed ? failed->rank : -1;
  end.incident = Incident{FaultKind::kCrash, last_step_ + 1, machine, machine_name(machine),
                          machine >= 0 ? 1 : 0,
                          "the job exited with status " + std::to_string(status) +
                              (failed ? ": " + failed->how : "")};
  if (failed) end.evidence["launcher_line"] = failed->how;
  return end;
}

std::optional<AttemptEnd> Supervisor::check_hang(double now) {
  const double quiet = now - last_progress_t_;
  if (quiet < options_.hang_timeout_s) return std::nullopt;
  Result<std::vector<diag::InflightReport>> reports = diag::read_inflight_reports(config_.run.dir);
  // Before the first step, start-up (loading, a checkpoint read) may take longer than a step
  // without being stuck: only a rank the watchdog saw blocked makes it a hang that early.
  const bool blocked = reports.ok() && !reports->empty();
  if (!stepped_ && !blocked && quiet < options_.start_timeout_s) return std::nullopt;
  AttemptEnd end;
  end.detected_t = now;
  std::string summary = "no rank completed a step for " + seconds(quiet) +
                        (stepped_ ? " after step " + std::to_string(last_step_) : " since the start");
  std::vector<int> suspects;
  if (reports.ok() && !reports->empty()) {
    const diag::HangAnalysis analysis = diag::analyze_hang(*reports);
    for (const diag::HangOutlier& o : analysis.outliers) {
      if (o.kind == diag::OutlierKind::kWaitsElsewhere) continue;
      if (std::find(suspects.begin(), suspects.end(), o.rank) == suspects.end()) {
        suspects.push_back(o.rank);
      }
    }
    end.evidence["hang_report"] = diag::format_hang_report(analysis, *reports, nullptr);
    end.evidence["waiting_ranks"] = static_cast<int>(reports->size());
  } else if (!reports.ok()) {
    end.evidence["inflight_error"] = reports.status().message();
  }
  int machine = -1, signals = 0;
  if (suspects.size() == 1) {
    end.rank = suspects[0];
    machine = machine_of_rank(end.rank);
    signals = 1;
    // A second signal: its own heartbeat is the one that stopped first.
    double oldest = now;
    int oldest_rank = -1;
    bool tie = false;
    for (const auto& [rank, t] : heartbeat_) {
      if (t < oldest - 1e-6) {
        oldest = t, oldest_rank = rank, tie = false;
      } else if (std::abs(t - oldest) <= 1e-6) {
        tie = true;
      }
    }
    if (oldest_rank == end.rank && !tie) ++signals;
    summary += "; the watchdog's reports name rank " + std::to_string(end.rank) +
               " as the one the others wait for";
  } else if (suspects.size() > 1) {
    summary += "; the watchdog's reports name " + std::to_string(suspects.size()) +
               " ranks, so no machine is blamed";
  } else {
    summary += "; no watchdog report names a rank";
  }
  end.incident = Incident{FaultKind::kHang, last_step_ + 1, machine, machine_name(machine),
                          signals, summary};
  return end;
}

// Minder-style detection on the attempt's live telemetry: a slow machine from the ranks' step
// compute times, and (with real hosts) a faulty one from the machine metrics.
std::optional<AttemptEnd> Supervisor::check_detect(double now) {
  if (now - last_detect_t_ < options_.detect_every_s || !stepped_) return std::nullopt;
  last_detect_t_ = now;
  const bool by_host = !pool_.single_host_mode();
  if (pool_.machines_in_use() < 3) return std::nullopt;  // a majority is needed
  const double from = detect_horizon(now);
  Result<diag::AlignedTelemetry> aligned = diag::align_telemetry(
      telemetry_.since(from), by_host ? telemetry::GroupBy::kHost : telemetry::GroupBy::kRank);
  if (!aligned.ok()) return std::nullopt;
  diag::DetectOptions detect;
  detect.window_s = options_.detect_window_s;
  detect.hop_s = std::max(aligned->interval_s, options_.detect_window_s / 6);
  detect.period_s = options_.detect_period_s;
  const diag::DenoiserSet denoisers;
  struct Check {
    FaultKind kind;
    std::vector<std::string> metrics;
  };
  std::vector<Check> checks = {{FaultKind::kSlow, {"step_compute_s"}}};
  if (by_host) {
    Result<std::vector<std::string>> machine_metrics = diag::metrics_to_check(*aligned, {});
    std::vector<std::string> metrics;
    for (const std::string& m : machine_metrics.ok() ? *machine_metrics : metrics) {
      if (!diag::is_step_metric(m)) metrics.push_back(m);
    }
    if (!metrics.empty()) checks.push_back({FaultKind::kFaulty, metrics});
  }
  for (const Check& check : checks) {
    if (check.kind == FaultKind::kSlow && aligned->metrics.count("step_compute_s") == 0) continue;
    detect.metrics = check.metrics;
    Result<diag::DetectReport> report = diag::detect_faults(*aligned, denoisers, detect);
    if (!report.ok() || !report->fault_found()) continue;
    const std::string name = report->machine();
    int machine = -1, rank = -1;
    if (by_host) {
      machine = pool_.find(name);
    } else if (name.rfind("rank", 0) == 0) {
      rank = std::atoi(name.c_str() + 4);
      machine = machine_of_rank(rank);
    }
    if (machine < 0) continue;
    std::string summary = "detect names " + name + " on " +
                          report->metrics[static_cast<size_t>(report->verdict_metric)].metric;
    if (check.kind == FaultKind::kSlow) {
      // Act only on a slowdown that costs the job: the suspect's compute against the others',
      // over the steps they completed in the window.
      const std::map<std::string, double> compute = recent_step_compute(
          telemetry_.since(std::max(attempt_t0_, now - options_.detect_window_s)),
          by_host ? telemetry::GroupBy::kHost : telemetry::GroupBy::kRank, kMinSlowSteps);
      std::vector<double> others;
      for (const auto& [m, median] : compute) {
        if (m != name) others.push_back(median);
      }
      const auto suspect = compute.find(name);
      if (suspect == compute.end() || others.empty()) continue;  // too few steps to tell
      const double normal = diag::median(others);
      if (normal <= 0 || suspect->second < (1 + options_.min_slowdown) * normal) continue;
      char line[160];
      std::snprintf(line, sizeof(line), "; its step compute is %.3fs against %.3fs (%.2fx)",
                    suspect->second, normal, suspect->second / normal);
      summary += line;
    }
    AttemptEnd end;
    end.detected_t = now;
    end.rank = rank;
    end.incident = Incident{check.kind, last_step_ + 1, machine, machine_name(machine), 1, summary};
    end.evidence["detect"] = diag::detect_report_json(*report);
    end.fault_t = report->metrics[static_cast<size_t>(report->verdict_metric)].fault->first_seen_t;
    return end;
  }
  return std::nullopt;
}

Result<AttemptEnd> Supervisor::watch(int attempt) {
  const auto pause = std::chrono::duration<double>(options_.poll_s);
  for (;;) {
    std::this_thread::sleep_for(pause);
    MS_RETURN_IF_ERROR(take_steps(attempt));
    if (const std::optional<int> status = process_->poll()) {
      process_->end(options_.stop_grace_s, SIGTERM);  // ranks left behind, if any
      MS_RETURN_IF_ERROR(take_steps(attempt));
      return exited(*status);
    }
    if (const int signal = g_signal.load()) {
      MS_LOG(Warn) << "supervise: signal " << signal << ": stopping the job (it saves first)";
      AttemptEnd end;
      end.interrupted = true;
      end.exit_status = process_->end(options_.stop_grace_s, SIGUSR1);
      MS_RETURN_IF_ERROR(take_steps(attempt));
      return end;
    }
    const double now = wall_time_s();
    telemetry_.forget_before(detect_horizon(now));  // keeps a long run's records bounded
    std::optional<AttemptEnd> end = check_hang(now);
    if (end) {
      end->exit_status = process_->end(10, SIGTERM);
      return *end;
    }
    end = check_detect(now);
    if (end) {
      // The job still runs: let it save a checkpoint at a step boundary and stop.
      end->exit_status = process_->end(options_.stop_grace_s, SIGUSR1);
      MS_RETURN_IF_ERROR(take_steps(attempt));
      return *end;
    }
  }
}

Status Supervisor::keep_evidence(int incident_no, const AttemptEnd& end) {
  const std::string dir = state_dir_ + "/incident-" + std::to_string(incident_no);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IOError("cannot create " + dir + ": " + ec.message());
  MS_RETURN_IF_ERROR(io::write_file_atomic(dir + "/output-tail.txt",
                                           last_lines(process_->output(), 200)));
  if (fs::is_directory(config_.run.dir + "/inflight", ec)) {
    fs::copy(config_.run.dir + "/inflight", dir + "/inflight",
             fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
  }
  json record = end.evidence;
  record["kind"] = std::string(fault_kind_name(end.incident->kind));
  record["exit_status"] = end.exit_status;
  record["summary"] = end.incident->summary;
  return io::write_file_atomic(dir + "/evidence.json", record.dump(2) + "\n");
}

Result<int> Supervisor::finish(const std::string& outcome, const std::string& reason) {
  const EttrReport report = compute_ettr(steps_, incidents_, t_begin_, wall_time_s());
  json incidents = json::array();
  for (size_t i = 0; i < report.incidents.size(); ++i) {
    const IncidentRecovery& r = report.incidents[i];
    incidents.push_back({{"kind", incident_kinds_[i]},
                         {"detect_s", r.detect_s},
                         {"recover_s", r.recover_s},
                         {"regain_s", r.regain_s},
                         {"resumed_from", r.resumed_from},
                         {"lost_steps", r.lost_steps}});
  }
  MS_RETURN_IF_ERROR(events_->write("end", {{"outcome", outcome},
                                            {"reason", reason},
                                            {"steps", report.steps},
                                            {"wall_s", report.wall_s},
                                            {"productive_s", report.productive_s},
                                            {"ettr", report.ettr},
                                            {"incidents", incidents}}));
  char line[256];
  std::snprintf(line, sizeof(line),
                "supervise: %s: %lld steps in %.1fs wall, %.1fs in kept steps: ETTR %.3f; %zu "
                "fault(s)",
                outcome.c_str(), static_cast<long long>(report.steps), report.wall_s,
                report.productive_s, report.ettr, report.incidents.size());
  MS_LOG(Info) << line << (reason.empty() ? "" : "; " + reason);
  for (size_t i = 0; i < report.incidents.size(); ++i) {
    const IncidentRecovery& r = report.incidents[i];
    std::snprintf(line, sizeof(line),
                  "supervise: fault %zu (%s): detected after %.1fs, training again after %.1fs, "
                  "%lld step(s) redone",
                  i + 1, incident_kinds_[i].c_str(), r.detect_s, r.recover_s,
                  static_cast<long long>(r.lost_steps));
    MS_LOG(Info) << line;
  }
  MS_LOG(Info) << "supervise: event log " << events_->path();
  return outcome == "completed" ? 0 : 1;
}

Result<int> Supervisor::run() {
  state_dir_ = options_.state_dir.empty() ? config_.run.dir + "/supervise" : options_.state_dir;
  std::error_code ec;
  fs::create_directories(state_dir_, ec);
  if (ec) return IOError("cannot create " + state_dir_ + ": " + ec.message());
  MS_ASSIGN_OR_RETURN(events_, EventLog::open(state_dir_ + "/events.jsonl"));
  t_begin_ = wall_time_s();
  MS_RETURN_IF_ERROR(events_->write("begin", {{"command", shell_line(job_.argv)},
                                              {"run_dir", config_.run.dir},
                                              {"steps", config_.train.steps},
                                              {"machines", pool_.machines_in_use()},
                                              {"max_evictions", options_.policy.max_evictions}}));
  install_signal_handlers();
  for (int attempt = 1;; ++attempt) {
    const Status free = wait_for_run_dir_release(config_.run.dir, options_.stop_grace_s);
    if (!free.ok()) return finish("stopped", free.message());
    Status launched = launch(attempt);
    if (!launched.ok()) return finish("stopped", launched.message());
    MS_ASSIGN_OR_RETURN(const AttemptEnd end, watch(attempt));
    if (end.completed) return finish("completed", "");
    if (end.interrupted) return finish("interrupted", "the supervisor received a signal");
    const Incident& incident = *end.incident;
    const int incident_no = static_cast<int>(incidents_.size()) + 1;
    incidents_.push_back({attempt, end.fault_t > 0 ? end.fault_t : last_progress_t_,
                          end.detected_t, stepped_ ? last_step_ : 0});
    incident_kinds_.emplace_back(fault_kind_name(incident.kind));
    MS_RETURN_IF_ERROR(keep_evidence(incident_no, end));
    process_.reset();
    MS_RETURN_IF_ERROR(events_->write(
        "fault", {{"attempt", attempt},
                  {"incident", incident_no},
                  {"kind", std::string(fault_kind_name(incident.kind))},
                  {"step", incident.step},
                  {"rank", end.rank},
                  {"machine", incident.machine_name},
                  {"signals", incident.signals},
                  {"exit_status", end.exit_status},
                  {"summary", incident.summary},
                  {"evidence", state_dir_ + "/incident-" + std::to_string(incident_no)}}));
    MS_LOG(Warn) << "supervise: " << fault_kind_name(incident.kind) << " fault at step "
                 << incident.step << ": " << incident.summary;
    const Decision decision = policy_.decide(incident);
    MS_LOG(Warn) << "supervise: " << decision.reason;
    if (decision.action == Action::kStop) {
      MS_RETURN_IF_ERROR(events_->write("stop", {{"incident", incident_no}, {"reason", decision.reason}}));
      return finish("stopped", decision.reason);
    }
    if (decision.action == Action::kEvictAndRestart) {
      pool_.remove(decision.machine, "incident " + std::to_string(incident_no) + " (" +
                                         std::string(fault_kind_name(incident.kind)) + ")");
      MS_RETURN_IF_ERROR(events_->write("evict", {{"incident", incident_no},
                                                  {"machine", machine_name(decision.machine)},
                                                  {"machines_left", pool_.machines_in_use()},
                                                  {"reason", decision.reason}}));
    } else if (decision.held_back) {
      MS_RETURN_IF_ERROR(events_->write("hold", {{"incident", incident_no},
                                                 {"machine", incident.machine_name},
                                                 {"reason", decision.reason}}));
    }
  }
}

// One supervisor per run directory: a second one would start a second job there and act on the
// first one's telemetry. Its lock is not the job's (train.lock), which each attempt takes.
Result<io::DirectoryLock> lock_supervision(const std::string& run_dir) {
  Result<io::DirectoryLock> lock = io::DirectoryLock::acquire(run_dir, "supervise.lock");
  if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) return lock;
  return FailedPrecondition("run.dir " + run_dir + " is already supervised: " +
                            lock.status().message() +
                            " (end that supervisor first, or set another run.dir)");
}

}  // namespace

Status wait_for_run_dir_release(const std::string& run_dir, double timeout_s) {
  const double deadline = wall_time_s() + timeout_s;
  for (bool told = false;; told = true) {
    Result<io::DirectoryLock> lock = io::DirectoryLock::acquire(run_dir, train::kRunDirLockName);
    if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) {
      return lock.status();  // a lock taken here is released at once
    }
    if (wall_time_s() >= deadline) {
      return FailedPrecondition("the run directory is still in use after " +
                                seconds(timeout_s) + ": " + lock.status().message() +
                                "; not starting an attempt over that job");
    }
    if (!told) {
      MS_LOG(Info) << "supervise: waiting for the training job that holds the run directory "
                      "to end: " << lock.status().message();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Result<int> supervise(const SuperviseOptions& options) {
  MS_ASSIGN_OR_RETURN(JobCommand job, parse_job_command(options.command));
  MS_ASSIGN_OR_RETURN(config::RunConfig config, load_job_config(job));
  if (options.hostfile.empty() == (options.ranks <= 0)) {
    return InvalidArgument("give the machines either as --ranks N (one machine, N rank slots) "
                           "or as --hostfile FILE");
  }
  if (!options.hostfile.empty() && !job.uses_hostfile) {
    return InvalidArgument("--hostfile is given but no argument of the job command holds "
                           "{hostfile} (e.g. `mpirun --hostfile {hostfile} -np {np} ...`)");
  }
  if (options.hostfile.empty()) {
    MS_RETURN_IF_ERROR(check_rank_slots(options.ranks, std::thread::hardware_concurrency()));
  }
  MachinePool pool = MachinePool::single_host(options.ranks);
  if (!options.hostfile.empty()) {
    MS_ASSIGN_OR_RETURN(pool, MachinePool::from_hostfile(options.hostfile));
  }
  // The first launch must fit, or the job is refused before anything runs.
  MS_RETURN_IF_ERROR(choose_world_size(config, pool.slots_in_use()).status());
  MS_ASSIGN_OR_RETURN(const io::DirectoryLock lock, lock_supervision(config.run.dir));
  Supervisor supervisor(options, std::move(job), std::move(config), std::move(pool));
  return supervisor.run();
}

}  // namespace ms::supervise
