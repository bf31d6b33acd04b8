// Fault detection (Minder): every simulated fault kind is found on the right machine after it
// starts, healthy jobs stay silent, and the pieces (grid alignment, continuity rule, metric
// priority, option checks) behave as documented. Jobs are short and the window, hop and period
// small, so the whole file runs in about a second.
#include "diag/detect.h"

#include <gtest/gtest.h>

#include <limits>

#include "diag/simulate.h"

namespace ms::diag {
namespace {

DetectOptions quick_options() {
  DetectOptions o;
  o.window_s = 30;
  o.hop_s = 5;
  o.period_s = 60;
  return o;
}

JobSimSpec small_job(FaultKind fault, uint64_t seed) {
  JobSimSpec spec;
  spec.machines = 6;
  spec.duration_s = 600;
  spec.fault = fault;
  spec.fault_machine = 4;
  spec.fault_start_s = 200;
  spec.seed = seed;
  return spec;
}

DetectReport detect_job(const JobSimSpec& spec, const DetectOptions& options) {
  Result<SimulatedJob> job = simulate_job(spec);
  EXPECT_TRUE(job.ok()) << job.status().to_string();
  Result<AlignedTelemetry> aligned = align_telemetry(job->ranks, telemetry::GroupBy::kHost);
  EXPECT_TRUE(aligned.ok()) << aligned.status().to_string();
  Result<DetectReport> report = detect_faults(*aligned, DenoiserSet{}, options);
  EXPECT_TRUE(report.ok()) << report.status().to_string();
  return std::move(report).value();
}

class FaultKindTest : public ::testing::TestWithParam<FaultKind> {};

TEST_P(FaultKindTest, FindsTheFaultyMachineAfterTheFaultStarts) {
  const JobSimSpec spec = small_job(GetParam(), 11);
  const DetectReport report = detect_job(spec, quick_options());
  ASSERT_TRUE(report.fault_found()) << fault_kind_name(GetParam());
  EXPECT_EQ(report.machine(), "node04");
  const PersistentCandidate& c = *report.metrics[report.verdict_metric].fault;
  EXPECT_GE(c.first_seen_t, spec.start_t + spec.fault_start_s);
  EXPECT_GE(c.declared_t - c.first_seen_t, 60.0);
}

INSTANTIATE_TEST_SUITE_P(AllFaults, FaultKindTest,
                         ::testing::Values(FaultKind::kSlowCpu, FaultKind::kNicDegrade,
                                           FaultKind::kMachineStop, FaultKind::kThermalThrottle,
                                           FaultKind::kMemoryLeak),
                         [](const auto& info) {
                           std::string name(fault_kind_name(info.param));
                           std::erase(name, '-');
                           return name;
                         });

TEST(DetectTest, TheVerdictComesFromTheFirstMetricInPriorityOrder) {
  const DetectReport report = detect_job(small_job(FaultKind::kNicDegrade, 3), quick_options());
  ASSERT_TRUE(report.fault_found());
  EXPECT_EQ(report.metrics[report.verdict_metric].metric, "pfc_pause_rate");
  EXPECT_EQ(report.metrics.front().metric, "cpu_util");
}

TEST(DetectTest, HealthyJobsWithNoiseSpikesAndLoadChangesStaySilent) {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const DetectReport report = detect_job(small_job(FaultKind::kNone, seed), quick_options());
    EXPECT_FALSE(report.fault_found()) << "seed " << seed << ": " << report.machine();
  }
}

TEST(DetectTest, ReportJsonNamesMachineMetricAndEvidence) {
  const DetectReport report = detect_job(small_job(FaultKind::kSlowCpu, 5), quick_options());
  const nlohmann::ordered_json j = detect_report_json(report);
  EXPECT_TRUE(j["fault"].get<bool>());
  EXPECT_EQ(j["machine"], "node04");
  EXPECT_EQ(j["metric"], "cpu_util");
  EXPECT_GT(j["evidence"]["declaring_window"]["normalized_distance"]["node04"].get<double>(), 3.0);
}

WindowScore window(double t, int candidate) {
  WindowScore w;
  w.t_end = t;
  w.candidate = candidate;
  return w;
}

TEST(ContinuityRuleTest, DeclaresOnlyWhenOneMachineStaysTheCandidateForThePeriod) {
  // Machine 2 for 30 s, interrupted; machine 1 from t=50 for 40 s.
  std::vector<WindowScore> w = {window(0, 2),  window(10, 2), window(20, 2), window(30, 2),
                                window(40, -1), window(50, 1), window(60, 1), window(70, 1),
                                window(80, 1), window(90, 1)};
  EXPECT_FALSE(find_persistent_candidate(w, 45).has_value());
  std::optional<PersistentCandidate> c = find_persistent_candidate(w, 40);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->machine, 1);
  EXPECT_EQ(c->first_seen_t, 50);
  EXPECT_EQ(c->declared_t, 90);
  EXPECT_FALSE(find_persistent_candidate(w, 41).has_value());
}

TEST(ContinuityRuleTest, AChangeOfCandidateRestartsTheClock) {
  std::vector<WindowScore> w = {window(0, 1), window(10, 1), window(20, 3), window(30, 1),
                                window(40, 1)};
  EXPECT_FALSE(find_persistent_candidate(w, 20).has_value());
  EXPECT_EQ(find_persistent_candidate(w, 10)->machine, 1);
  EXPECT_EQ(find_persistent_candidate(w, 10)->declared_t, 10);
}

telemetry::RankTelemetry rank_with(int rank, const std::string& host, int samples, double tx_rate) {
  telemetry::RankTelemetry r;
  r.rank = rank;
  r.host = host;
  for (int k = 0; k < samples; ++k) {
    telemetry::HostRecord h;
    h.t = 100 + k;
    h.host = host;
    h.rank = rank;
    h.cpu_util = 0.5;
    h.net_tx_bytes = 1000 + tx_rate * k;
    h.extra["pfc_pause_frames"] = 2.0 * k;
    h.extra["gpu_util"] = 0.9;
    r.hosts.push_back(h);
  }
  return r;
}

TEST(AlignTest, CountersBecomeRatesAndAStoppedMachineReadsZero) {
  std::vector<telemetry::RankTelemetry> ranks = {rank_with(0, "a", 10, 50), rank_with(1, "b", 10, 50),
                                                 rank_with(2, "c", 4, 80)};
  Result<AlignedTelemetry> a = align_telemetry(ranks, telemetry::GroupBy::kHost);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->samples, 10);
  EXPECT_EQ(a->interval_s, 1.0);
  EXPECT_EQ(a->machines, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(a->metrics.at("net_tx_rate")[0][5], 50);
  EXPECT_EQ(a->metrics.at("pfc_pause_rate")[1][3], 2);
  EXPECT_EQ(a->metrics.at("net_tx_rate")[2][3], 80);
  EXPECT_EQ(a->metrics.at("cpu_util")[2][5], 0.5);  // gap of two samples: held
  EXPECT_EQ(a->metrics.at("cpu_util")[2][9], 0.0);  // stopped: zero
  EXPECT_EQ(a->metrics.count("gpu_util"), 1u);
}

// The grid is sized by the records' time span: one timestamp 1e8 s after the others used to
// ask for gigabytes. It is refused before anything is allocated, naming the two records.
TEST(AlignTest, ATimestampFarFromTheOthersIsRefusedNamingFileAndLine) {
  std::vector<telemetry::RankTelemetry> ranks = {rank_with(0, "a", 10, 50), rank_with(1, "b", 10, 50),
                                                 rank_with(2, "c", 10, 50)};
  for (telemetry::RankTelemetry& r : ranks) {
    r.path = "tel/rank-0000" + std::to_string(r.rank) + ".jsonl";
    for (size_t k = 0; k < r.hosts.size(); ++k) r.hosts[k].line = k + 2;
  }
  ranks[1].hosts.back().t += 1e8;
  Result<AlignedTelemetry> a = align_telemetry(ranks, telemetry::GroupBy::kHost);
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = a.status().message();
  EXPECT_NE(m.find("tel/rank-00001.jsonl:11: key 't'"), std::string::npos) << m;
  EXPECT_NE(m.find("tel/rank-00000.jsonl:2"), std::string::npos) << m;
}

TEST(AlignTest, AGridJustWithinTheLimitIsBuilt) {
  std::vector<telemetry::RankTelemetry> ranks = {rank_with(0, "a", 10, 50), rank_with(1, "b", 10, 50),
                                                 rank_with(2, "c", 10, 50)};
  ranks[1].hosts.back().t += 1000;  // a long pause: a sparse but reasonable grid
  Result<AlignedTelemetry> a = align_telemetry(ranks, telemetry::GroupBy::kHost);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->samples, 1010);
}

TEST(AlignTest, GroupByRankSeparatesRanksOfOneHost) {
  std::vector<telemetry::RankTelemetry> ranks = {rank_with(0, "h", 5, 1), rank_with(1, "h", 5, 1),
                                                 rank_with(2, "h", 5, 1)};
  EXPECT_EQ(align_telemetry(ranks, telemetry::GroupBy::kHost).status().code(),
            StatusCode::kInvalidArgument);
  Result<AlignedTelemetry> a = align_telemetry(ranks, telemetry::GroupBy::kRank);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->machines.size(), 3u);
  EXPECT_EQ(align_telemetry({}, telemetry::GroupBy::kRank).status().code(), StatusCode::kNotFound);
}

TEST(AlignTest, MetricPriorityPutsUtilizationFirstAndChecksRequestedNames) {
  std::vector<telemetry::RankTelemetry> ranks = {rank_with(0, "a", 5, 1), rank_with(1, "b", 5, 1),
                                                 rank_with(2, "c", 5, 1)};
  Result<AlignedTelemetry> a = align_telemetry(ranks, telemetry::GroupBy::kHost);
  ASSERT_TRUE(a.ok());
  Result<std::vector<std::string>> order = metrics_to_check(*a, {});
  ASSERT_TRUE(order.ok());
  EXPECT_EQ(*order, (std::vector<std::string>{"cpu_util", "gpu_util", "pfc_pause_rate",
                                              "net_tx_rate", "net_rx_rate", "mem_used"}));
  Result<std::vector<std::string>> bad = metrics_to_check(*a, {"cpu_util", "gpu_temp"});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpu_temp"), std::string::npos);
}

// Four ranks of one host; every 4 s a step ends, and every rank but `slow` waits 0.6 s in
// collectives for the slow one, which waits only 0.05 s.
std::vector<telemetry::RankTelemetry> ranks_with_slow_worker(int slow) {
  std::vector<telemetry::RankTelemetry> ranks;
  for (int r = 0; r < 4; ++r) {
    telemetry::RankTelemetry t = rank_with(r, "h", 120, 10);
    for (int step = 1; step <= 30; ++step) {
      telemetry::StepRecordRead s;
      s.t = 100 + 4.0 * step - 0.5;
      s.rank = r;
      s.host = "h";
      s.step.step = step;
      s.step.phases.fwd_s = 1.0 + (r == slow ? 0.55 : 0.0);
      s.step.phases.comm_wait_s = r == slow ? 0.05 : 0.6 + 0.01 * r;
      t.steps.push_back(s);
    }
    ranks.push_back(std::move(t));
  }
  return ranks;
}

TEST(AlignTest, StepPhasesBecomeHeldPerRankMetricsCheckedOnlyByName) {
  Result<AlignedTelemetry> a =
      align_telemetry(ranks_with_slow_worker(2), telemetry::GroupBy::kRank);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  const auto& wait = a->metrics.at("step_comm_wait_s");
  EXPECT_EQ(wait[0][2], 0.0);    // before the first step ends
  EXPECT_EQ(wait[0][5], 0.6);    // held between steps
  EXPECT_EQ(wait[2][9], 0.05);
  EXPECT_EQ(a->metrics.at("step_compute_s")[2][9], 1.55);
  Result<std::vector<std::string>> order = metrics_to_check(*a, {});
  ASSERT_TRUE(order.ok());
  for (const std::string& m : *order) EXPECT_FALSE(is_step_metric(m)) << m;
}

TEST(DetectTest, ASlowRankOfOneHostIsFoundFromItsStepPhases) {
  Result<AlignedTelemetry> a =
      align_telemetry(ranks_with_slow_worker(2), telemetry::GroupBy::kRank);
  ASSERT_TRUE(a.ok());
  DetectOptions o;
  o.window_s = 8;
  o.hop_s = 2;
  o.period_s = 16;
  o.metrics = {"step_comm_wait_s"};
  Result<DetectReport> report = detect_faults(*a, DenoiserSet{}, o);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  ASSERT_TRUE(report->fault_found());
  const MetricResult& verdict = report->metrics[report->verdict_metric];
  ASSERT_TRUE(verdict.fault.has_value());
  EXPECT_EQ(report->machines[verdict.fault->machine], "rank2");
}

TEST(DetectOptionsTest, NonFiniteAndOutOfRangeValuesAreRefusedNamingTheFlag) {
  Result<SimulatedJob> job = simulate_job(small_job(FaultKind::kNone, 1));
  ASSERT_TRUE(job.ok());
  Result<AlignedTelemetry> a = align_telemetry(job->ranks, telemetry::GroupBy::kHost);
  ASSERT_TRUE(a.ok());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const struct {
    double DetectOptions::*field;
    double value;
    const char* message;
  } cases[] = {
      {&DetectOptions::threshold, nan, "--threshold must be a finite number above 0 (got nan)"},
      {&DetectOptions::threshold, -1, "--threshold must be a finite number above 0 (got -1)"},
      {&DetectOptions::threshold, inf, "--threshold must be a finite number above 0 (got inf)"},
      {&DetectOptions::spread_floor, -0.5,
       "--spread-floor must be a finite number at least 0 (got -0.5)"},
      {&DetectOptions::spread_floor, nan,
       "--spread-floor must be a finite number at least 0 (got nan)"},
      {&DetectOptions::period_s, -1, "--period-s must be a finite number at least 0 (got -1)"},
      {&DetectOptions::window_s, inf, "--window-s must be a finite number above 0 (got inf)"},
      {&DetectOptions::hop_s, nan, "--hop-s must be a finite number above 0 (got nan)"},
  };
  for (const auto& c : cases) {
    DetectOptions o = quick_options();
    o.*c.field = c.value;
    const Result<DetectReport> r = detect_faults(*a, {}, o);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message);
  }
  DetectOptions zero_floor = quick_options();
  zero_floor.spread_floor = 0;
  EXPECT_TRUE(check_detect_options(zero_floor).ok());
}

TEST(DetectOptionsTest, WindowsThatDoNotFitTheDataOrTheDenoiserAreRefused) {
  Result<SimulatedJob> job = simulate_job(small_job(FaultKind::kNone, 1));
  ASSERT_TRUE(job.ok());
  Result<AlignedTelemetry> a = align_telemetry(job->ranks, telemetry::GroupBy::kHost);
  ASSERT_TRUE(a.ok());
  DetectOptions too_long = quick_options();
  too_long.window_s = 5000;
  EXPECT_EQ(detect_faults(*a, {}, too_long).status().code(), StatusCode::kInvalidArgument);
  DenoiserSet with_model;
  Result<LstmVae> model = LstmVae::create({20, 4, 2, 0.01}, 1);
  ASSERT_TRUE(model.ok());
  with_model.per_metric["cpu_util"] = std::make_shared<LstmVaeDenoiser>(std::move(model).value());
  Result<DetectReport> r = detect_faults(*a, with_model, quick_options());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--window-s 20"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace ms::diag
