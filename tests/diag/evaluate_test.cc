// Scoring rules of ms-diagnose eval on hand-made outcomes, and a small end-to-end evaluation.
#include "diag/evaluate.h"

#include <gtest/gtest.h>

namespace ms::diag {
namespace {

JobResult job(FaultKind fault, const std::string& truth, double start, bool detected,
              const std::string& machine = "", double declared = 0) {
  JobResult r;
  r.label.fault = fault;
  r.label.machine = truth;
  r.label.fault_start_t = start;
  r.detected = detected;
  r.machine = machine;
  r.declared_t = declared;
  return r;
}

TEST(EvaluateTest, ClassifiesEachKindOfOutcome) {
  EXPECT_EQ(classify(job(FaultKind::kNone, "", 0, false)), Outcome::kTrueNegative);
  EXPECT_EQ(classify(job(FaultKind::kNone, "", 0, true, "n1", 5)), Outcome::kFalsePositive);
  EXPECT_EQ(classify(job(FaultKind::kSlowCpu, "n2", 100, false)), Outcome::kFalseNegative);
  EXPECT_EQ(classify(job(FaultKind::kSlowCpu, "n2", 100, true, "n2", 130)), Outcome::kTruePositive);
  EXPECT_EQ(classify(job(FaultKind::kSlowCpu, "n2", 100, true, "n3", 130)), Outcome::kMisattributed);
  EXPECT_EQ(classify(job(FaultKind::kSlowCpu, "n2", 100, true, "n2", 90)), Outcome::kMisattributed);
}

TEST(EvaluateTest, PrecisionRecallF1AndDelayFollowTheirDefinitions) {
  // 3 TP (delays 10, 20, 60), 1 FP on a healthy job, 1 misattributed (FP + FN), 1 FN, 2 TN.
  const std::vector<JobResult> results = {
      job(FaultKind::kSlowCpu, "a", 100, true, "a", 110),
      job(FaultKind::kMemoryLeak, "b", 100, true, "b", 120),
      job(FaultKind::kNicDegrade, "c", 100, true, "c", 160),
      job(FaultKind::kNone, "", 0, true, "d", 50),
      job(FaultKind::kThermalThrottle, "e", 100, true, "f", 150),
      job(FaultKind::kMachineStop, "g", 100, false),
      job(FaultKind::kNone, "", 0, false),
      job(FaultKind::kNone, "", 0, false)};
  const Scores s = score_results(results);
  EXPECT_EQ(s.jobs, 8);
  EXPECT_EQ(s.tp, 3);
  EXPECT_EQ(s.fp, 2);
  EXPECT_EQ(s.fn, 2);
  EXPECT_EQ(s.tn, 2);
  EXPECT_DOUBLE_EQ(s.precision, 3.0 / 5.0);
  EXPECT_DOUBLE_EQ(s.recall, 3.0 / 5.0);
  EXPECT_DOUBLE_EQ(s.f1, 0.6);
  EXPECT_DOUBLE_EQ(s.mean_delay_s, 30.0);
}

TEST(EvaluateTest, EmptyDenominatorsScoreOne) {
  const Scores s = score_results({job(FaultKind::kNone, "", 0, false)});
  EXPECT_EQ(s.precision, 1.0);
  EXPECT_EQ(s.recall, 1.0);
  EXPECT_EQ(s.mean_delay_s, 0.0);
}

TEST(EvaluateTest, JobSpecsCycleThroughEveryKindDeterministically) {
  EvalSpec spec;
  spec.seed = 9;
  for (int i = 0; i < 12; ++i) {
    const JobSimSpec a = eval_job_spec(spec, i), b = eval_job_spec(spec, i);
    EXPECT_EQ(a.fault, all_fault_kinds()[i % 6]);
    EXPECT_EQ(a.seed, b.seed);
    EXPECT_GE(a.fault_start_s, 0.25 * spec.duration_s);
    EXPECT_LE(a.fault_start_s, 0.5 * spec.duration_s);
    EXPECT_LT(a.fault_machine, spec.machines);
  }
}

TEST(EvaluateTest, SmallEvaluationFindsEveryInjectedFault) {
  EvalSpec spec;
  spec.jobs = 6;
  spec.machines = 6;
  spec.duration_s = 600;
  spec.detect.window_s = 30;
  spec.detect.hop_s = 5;
  spec.detect.period_s = 60;
  spec.threads = 2;
  Result<std::vector<JobResult>> results = run_evaluation(spec, DenoiserSet{});
  ASSERT_TRUE(results.ok()) << results.status().to_string();
  const Scores s = score_results(*results);
  EXPECT_EQ(s.tp, 5);
  EXPECT_EQ(s.tn, 1);
  EXPECT_EQ(eval_report_json(spec, *results)["results"].size(), 6u);
}

}  // namespace
}  // namespace ms::diag
