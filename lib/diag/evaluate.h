// Scoring of the fault detector on labelled simulated jobs (ms-diagnose eval): each job is
// simulated (simulate.h), aligned and run through detect (detect.h), and its verdict compared
// with the injected fault. Rules, per job:
//   healthy job, nothing declared            -> true negative
//   healthy job, a machine declared          -> false positive
//   faulty job, nothing declared             -> false negative
//   faulty job, the faulty machine declared at or after the fault's start
//                                             -> true positive; delay = declared - fault start
//   faulty job, another machine declared, or the right one before the fault began
//                                             -> a false positive and a false negative
// precision = TP / (TP + FP) and recall = TP / (TP + FN), each 1 when its denominator is 0;
// F1 is their harmonic mean. Minder reports precision 0.904 and recall 0.883 on real faults.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "diag/detect.h"
#include "diag/simulate.h"

namespace ms::diag {

inline constexpr double kMinderPrecision = 0.904, kMinderRecall = 0.883;

struct JobResult {
  JobLabel label;
  bool detected = false;
  std::string machine, metric;
  double first_seen_t = 0, declared_t = 0;
};

enum class Outcome { kTruePositive, kTrueNegative, kFalsePositive, kFalseNegative, kMisattributed };
Outcome classify(const JobResult& job);

struct Scores {
  int jobs = 0, tp = 0, fp = 0, fn = 0, tn = 0;
  double precision = 1, recall = 1, f1 = 1;
  double mean_delay_s = 0;  // over true positives; 0 when there are none
};
Scores score_results(const std::vector<JobResult>& results);

struct EvalSpec {
  int jobs = 100;
  uint64_t seed = 1;
  int machines = 8;
  double duration_s = 1800;
  // Each faulty job's fault starts uniformly within [first, last] * duration_s.
  double fault_start_first = 0.25, fault_start_last = 0.5;
  // Each faulty job's severity (simulate.h) is drawn uniformly from [min_severity, 1].
  double min_severity = 1.0;
  DetectOptions detect;
  int threads = 1;
};

// The spec of job i: kinds cycle through all_fault_kinds() (one healthy job in six), with a
// seeded fault machine, fault start, severity and job seed.
JobSimSpec eval_job_spec(const EvalSpec& spec, int i);

// Simulates and scores every job. Errors from simulation or detection pass through, naming the
// job index.
Result<std::vector<JobResult>> run_evaluation(const EvalSpec& spec, const DenoiserSet& denoisers);

// Overall and per-fault-kind scores, Minder's published figures beside them, and every job.
nlohmann::ordered_json eval_report_json(const EvalSpec& spec,
                                        const std::vector<JobResult>& results);

}  // namespace ms::diag
