// Detection scoring over labelled simulated jobs; see evaluate.h for the rules.
#include "diag/evaluate.h"

#include <algorithm>
#include <thread>

#include "core/host_metrics.h"
#include "core/philox.h"
#include "core/thread_pool.h"

namespace ms::diag {

// Threads --threads may ask for per CPU: the jobs are compute-bound, so more only wait.
constexpr int kMaxEvalThreadsPerCpu = 8;

Outcome classify(const JobResult& job) {
  const bool faulty = job.label.fault != FaultKind::kNone;
  if (!faulty) return job.detected ? Outcome::kFalsePositive : Outcome::kTrueNegative;
  if (!job.detected) return Outcome::kFalseNegative;
  if (job.machine == job.label.machine && job.declared_t >= job.label.fault_start_t) {
    return Outcome::kTruePositive;
  }
  return Outcome::kMisattributed;
}

Scores score_results(const std::vector<JobResult>& results) {
  Scores s;
  double delay_sum = 0;
  for (const JobResult& job : results) {
    ++s.jobs;
    switch (classify(job)) {
      case Outcome::kTruePositive:
        ++s.tp;
        delay_sum += job.declared_t - job.label.fault_start_t;
        break;
      case Outcome::kTrueNegative: ++s.tn; break;
      case Outcome::kFalsePositive: ++s.fp; break;
      case Outcome::kFalseNegative: ++s.fn; break;
      case Outcome::kMisattributed:
        ++s.fp;
        ++s.fn;
        break;
    }
  }
  if (s.tp + s.fp > 0) s.precision = static_cast<double>(s.tp) / (s.tp + s.fp);
  if (s.tp + s.fn > 0) s.recall = static_cast<double>(s.tp) / (s.tp + s.fn);
  s.f1 = s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0;
  s.mean_delay_s = s.tp > 0 ? delay_sum / s.tp : 0;
  return s;
}

JobSimSpec eval_job_spec(const EvalSpec& spec, int i) {
  const uint64_t stream = stream_id("diag.eval.jobs");
  const uint64_t k = 4 * static_cast<uint64_t>(i);
  JobSimSpec job;
  job.machines = spec.machines;
  job.duration_s = spec.duration_s;
  job.fault = all_fault_kinds()[static_cast<size_t>(i) % all_fault_kinds().size()];
  job.fault_machine = std::min(spec.machines - 1,
                               static_cast<int>(uniform(spec.seed, stream, k) * spec.machines));
  const double first = spec.fault_start_first, last = spec.fault_start_last;
  job.fault_start_s = spec.duration_s * (first + (last - first) * uniform(spec.seed, stream, k + 1));
  job.severity = spec.min_severity + (1 - spec.min_severity) * uniform(spec.seed, stream, k + 3);
  job.seed = (static_cast<uint64_t>(philox_block(spec.seed, stream, k + 2)[0]) << 32) |
             philox_block(spec.seed, stream, k + 2)[1];
  return job;
}

namespace {

Result<JobResult> evaluate_job(const EvalSpec& spec, const DenoiserSet& denoisers, int i) {
  MS_ASSIGN_OR_RETURN(SimulatedJob job, simulate_job(eval_job_spec(spec, i)));
  MS_ASSIGN_OR_RETURN(AlignedTelemetry aligned, align_telemetry(job.ranks, telemetry::GroupBy::kHost));
  MS_ASSIGN_OR_RETURN(DetectReport report, detect_faults(aligned, denoisers, spec.detect));
  JobResult result;
  result.label = job.label;
  result.detected = report.fault_found();
  if (result.detected) {
    const MetricResult& m = report.metrics[report.verdict_metric];
    result.machine = report.machine();
    result.metric = m.metric;
    result.first_seen_t = m.fault->first_seen_t;
    result.declared_t = m.fault->declared_t;
  }
  return result;
}

std::string outcome_name(Outcome o) {
  switch (o) {
    case Outcome::kTruePositive: return "TP";
    case Outcome::kTrueNegative: return "TN";
    case Outcome::kFalsePositive: return "FP";
    case Outcome::kFalseNegative: return "FN";
    case Outcome::kMisattributed: return "FP+FN";
  }
  return "";
}

nlohmann::ordered_json scores_json(const Scores& s) {
  return {{"jobs", s.jobs},           {"tp", s.tp},         {"fp", s.fp},
          {"fn", s.fn},               {"tn", s.tn},         {"precision", s.precision},
          {"recall", s.recall},       {"f1", s.f1},         {"mean_delay_s", s.mean_delay_s}};
}

}  // namespace

Result<std::vector<JobResult>> run_evaluation(const EvalSpec& spec, const DenoiserSet& denoisers) {
  if (spec.jobs < 1) return InvalidArgument("--jobs must be >= 1");
  // A thread per --threads and a result per job are allocated up front; a thread beyond the
  // machine's cores only waits, so more than kMaxEvalThreadsPerCpu per CPU is refused.
  const int64_t max_threads =
      int64_t{kMaxEvalThreadsPerCpu} * std::max(1u, std::thread::hardware_concurrency());
  if (spec.threads > max_threads) {
    return InvalidArgument("--threads " + std::to_string(spec.threads) + " is more than " +
                           std::to_string(max_threads) + " (" +
                           std::to_string(kMaxEvalThreadsPerCpu) + " per CPU of this machine)");
  }
  MS_RETURN_IF_ERROR(check_memory_need(
      static_cast<double>(spec.jobs) * sizeof(Result<JobResult>),
      "--jobs " + std::to_string(spec.jobs) + " (a result kept per simulated job)"));
  std::vector<Result<JobResult>> results(spec.jobs, Status(Internal("job not evaluated")));
  ThreadPool pool(static_cast<size_t>(std::max(1, spec.threads)));
  pool.parallel_for(0, spec.jobs, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      results[i] = evaluate_job(spec, denoisers, static_cast<int>(i));
    }
  });
  std::vector<JobResult> out;
  for (int i = 0; i < spec.jobs; ++i) {
    if (!results[i].ok()) return results[i].status().with_context("eval job " + std::to_string(i));
    out.push_back(std::move(results[i]).value());
  }
  return out;
}

nlohmann::ordered_json eval_report_json(const EvalSpec& spec,
                                        const std::vector<JobResult>& results) {
  nlohmann::ordered_json j;
  j["jobs"] = spec.jobs;
  j["seed"] = spec.seed;
  j["machines"] = spec.machines;
  j["duration_s"] = spec.duration_s;
  j["min_severity"] = spec.min_severity;
  j["detect"] = {{"window_s", spec.detect.window_s}, {"hop_s", spec.detect.hop_s},
                 {"threshold", spec.detect.threshold}, {"period_s", spec.detect.period_s}};
  j["scores"] = scores_json(score_results(results));
  j["minder_published"] = {{"precision", kMinderPrecision}, {"recall", kMinderRecall}};
  nlohmann::ordered_json by_kind;
  for (FaultKind kind : all_fault_kinds()) {
    std::vector<JobResult> subset;
    std::copy_if(results.begin(), results.end(), std::back_inserter(subset),
                 [kind](const JobResult& r) { return r.label.fault == kind; });
    by_kind[std::string(fault_kind_name(kind))] = scores_json(score_results(subset));
  }
  j["by_fault"] = by_kind;
  nlohmann::ordered_json jobs = nlohmann::ordered_json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    const JobResult& r = results[i];
    jobs.push_back({{"job", i},
                    {"fault", std::string(fault_kind_name(r.label.fault))},
                    {"fault_machine", r.label.machine},
                    {"fault_start_t", r.label.fault_start_t},
                    {"severity", r.label.severity},
                    {"detected_machine", r.machine},
                    {"metric", r.metric},
                    {"declared_t", r.declared_t},
                    {"outcome", outcome_name(classify(r))}});
  }
  j["results"] = jobs;
  return j;
}

}  // namespace ms::diag
