// The telemetry and trace simulators: deterministic, labelled, valid files, checked specs.
#include "diag/simulate.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "io/atomic_file.h"
#include "telemetry/reader.h"

namespace ms::diag {
namespace {

TEST(SimulateTest, SameSpecSameJob) {
  JobSimSpec spec;
  spec.machines = 3;
  spec.duration_s = 30;
  spec.fault = FaultKind::kSlowCpu;
  spec.fault_machine = 1;
  spec.fault_start_s = 10;
  Result<SimulatedJob> a = simulate_job(spec), b = simulate_job(spec);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->ranks.size(), 3u);
  EXPECT_EQ(a->ranks[1].hosts[20].cpu_util, b->ranks[1].hosts[20].cpu_util);
  EXPECT_EQ(a->label.machine, "node01");
  EXPECT_EQ(a->label.fault_start_t, spec.start_t + 10);
  EXPECT_EQ(a->ranks[0].hosts.size(), 31u);
}

TEST(SimulateTest, AStoppedMachineStopsReportingAndTheJobStopsStepping) {
  JobSimSpec spec;
  spec.machines = 3;
  spec.ranks_per_machine = 2;
  spec.duration_s = 40;
  spec.fault = FaultKind::kMachineStop;
  spec.fault_machine = 2;
  spec.fault_start_s = 20;
  Result<SimulatedJob> job = simulate_job(spec);
  ASSERT_TRUE(job.ok());
  ASSERT_EQ(job->ranks.size(), 6u);
  EXPECT_EQ(job->ranks[4].hosts.size(), 20u);
  EXPECT_EQ(job->ranks[0].hosts.size(), 41u);
  EXPECT_LT(job->ranks[0].steps.back().t, spec.start_t + 20);
}

TEST(SimulateTest, ImpossibleSpecsAreRefused) {
  JobSimSpec spec;
  spec.fault = FaultKind::kMemoryLeak;
  spec.fault_machine = 8;
  EXPECT_EQ(simulate_job(spec).status().code(), StatusCode::kInvalidArgument);
  spec.fault_machine = 1;
  spec.fault_start_s = 5000;
  EXPECT_EQ(simulate_job(spec).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_fault_kind("gremlins").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*parse_fault_kind("thermal-throttle"), FaultKind::kThermalThrottle);
  TraceSimSpec trace;
  trace.slow_rank = 4;
  EXPECT_EQ(simulate_traces(trace).status().code(), StatusCode::kInvalidArgument);
}

TEST(SimulateTest, WrittenJobReadsBackThroughTheTelemetryReader) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ms_simulate_test_" + std::to_string(getpid()))).string();
  JobSimSpec spec;
  spec.machines = 3;
  spec.duration_s = 20;
  spec.fault = FaultKind::kNicDegrade;
  spec.fault_machine = 0;
  spec.fault_start_s = 5;
  Result<SimulatedJob> job = simulate_job(spec);
  ASSERT_TRUE(job.ok());
  ASSERT_TRUE(write_job(*job, dir).ok());
  Result<std::vector<telemetry::RankTelemetry>> read = telemetry::read_telemetry_dir(dir + "/telemetry");
  ASSERT_TRUE(read.ok()) << read.status().to_string();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[0].hosts.size(), job->ranks[0].hosts.size());
  EXPECT_EQ((*read)[0].steps.size(), job->ranks[0].steps.size());
  EXPECT_GT((*read)[0].hosts.back().extra.at("pfc_pause_frames"), 0);
  Result<std::string> labels = io::read_file(dir + "/labels.json");
  ASSERT_TRUE(labels.ok());
  EXPECT_NE(labels->find("\"nic-degrade\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ms::diag
