// TelemetryWriter and TraceWriter: what they write reads back through the readers, a resumed
// writer keeps earlier records and cuts a crash's torn line, and write failures are reported.
#include "telemetry/writer.h"

#include <gtest/gtest.h>

#include "io/fault_env.h"
#include "telemetry/reader.h"
#include "tests/telemetry/telemetry_test_util.h"

namespace ms::telemetry {
namespace {

using testing::TempDir;

constexpr double kNoPeriodicSamples = 3600;  // only the sample taken at open()

std::unique_ptr<TelemetryWriter> open_writer(const std::string& run_dir, const std::string& proc,
                                             int rank = 3) {
  Result<std::unique_ptr<TelemetryWriter>> w = TelemetryWriter::open(
      io::default_env(), run_dir, rank, "node07", MeshCoord{1, 0, 2, 1}, kNoPeriodicSamples, proc);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  return w.ok() ? std::move(w).value() : nullptr;
}

StepRecord sample_step(int64_t step) {
  StepRecord s;
  s.step = step;
  s.loss = 2.5;
  s.grad_norm = 0.75;
  s.lr = 3e-4;
  s.tokens_per_s = 5120;
  s.step_s = 0.42;
  s.phases = StepPhases{0.01, 0.12, 0.25, 0.02, 0.02};
  return s;
}

TEST(TelemetryWriter, RoundTripsHostAndStepRecords) {
  TempDir dir;
  testing::write_fake_proc(dir.file("proc"));
  std::unique_ptr<TelemetryWriter> writer = open_writer(dir.path(), dir.file("proc"));
  ASSERT_NE(writer, nullptr);
  EXPECT_EQ(writer->path(), dir.path() + "/telemetry/rank-00003.jsonl");
  ASSERT_TRUE(writer->write_step(sample_step(120)).ok());
  ASSERT_TRUE(writer->close().ok());

  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path() + "/telemetry");
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  ASSERT_EQ(ranks->size(), 1u);
  const RankTelemetry& r = ranks->front();
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.host, "node07");
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_DOUBLE_EQ(r.hosts[0].mem_used, 2000000.0 * 1024);
  EXPECT_DOUBLE_EQ(r.hosts[0].net_tx_bytes, 1000);
  EXPECT_DOUBLE_EQ(r.hosts[0].net_rx_bytes, 500);
  EXPECT_DOUBLE_EQ(r.hosts[0].extra.at("mem_total"), 8000000.0 * 1024);
  ASSERT_EQ(r.steps.size(), 1u);
  const StepRecordRead& s = r.steps[0];
  EXPECT_EQ(s.mesh.dp, 1);
  EXPECT_EQ(s.mesh.pp, 2);
  EXPECT_EQ(s.mesh.cp, 1);
  EXPECT_EQ(s.step.step, 120);
  EXPECT_DOUBLE_EQ(s.step.loss, 2.5);
  EXPECT_DOUBLE_EQ(s.step.phases.bwd_s, 0.25);
  EXPECT_GT(s.t, 1.6e9);  // seconds since the Unix epoch
}

TEST(TelemetryWriter, RoundTripsMoeCountsAndOmitsThemForDenseSteps) {
  TempDir dir;
  testing::write_fake_proc(dir.file("proc"));
  std::unique_ptr<TelemetryWriter> writer = open_writer(dir.path(), dir.file("proc"));
  ASSERT_NE(writer, nullptr);
  StepRecord moe = sample_step(7);
  moe.expert_tokens = {{10, 0, 30}, {5, 25, 10}};
  moe.dropped_tokens = {0, 4};
  ASSERT_TRUE(writer->write_step(moe).ok());
  ASSERT_TRUE(writer->write_step(sample_step(8)).ok());
  ASSERT_TRUE(writer->close().ok());

  const std::string text = testing::read_text(writer->path());
  EXPECT_NE(text.find(R"("expert_tokens":[[10,0,30],[5,25,10]],"dropped_tokens":[0,4])"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("expert_tokens", text.find(R"("step":8)")), std::string::npos)
      << "a dense step writes no MoE keys";
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path() + "/telemetry");
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  const std::vector<StepRecordRead>& steps = ranks->front().steps;
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0].step.expert_tokens, moe.expert_tokens);
  EXPECT_EQ(steps[0].step.dropped_tokens, moe.dropped_tokens);
  EXPECT_TRUE(steps[1].step.expert_tokens.empty());
  EXPECT_TRUE(steps[1].step.dropped_tokens.empty());
}

TEST(TelemetryWriter, HostExtraKeysJoinTheHostRecord) {
  TempDir dir;
  testing::write_fake_proc(dir.file("proc"));
  std::unique_ptr<TelemetryWriter> writer = open_writer(dir.path(), dir.file("proc"));
  ASSERT_NE(writer, nullptr);
  HostRecord record;
  record.t = 100;
  record.host = "node07";
  record.rank = 3;
  record.extra["gpu_util"] = 0.5;
  ASSERT_TRUE(writer->write_host(record).ok());
  ASSERT_TRUE(writer->close().ok());
  Result<RankTelemetry> r = read_telemetry_file(writer->path());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->hosts.size(), 2u);
  EXPECT_DOUBLE_EQ(r->hosts[1].extra.at("gpu_util"), 0.5);
}

TEST(TelemetryWriter, ResumeAppendsAndCutsATornLastLine) {
  TempDir dir;
  testing::write_fake_proc(dir.file("proc"));
  {
    std::unique_ptr<TelemetryWriter> writer = open_writer(dir.path(), dir.file("proc"));
    ASSERT_TRUE(writer->write_step(sample_step(1)).ok());
  }
  const std::string path = dir.path() + "/telemetry/rank-00003.jsonl";
  testing::write_text(path, testing::read_text(path) + "{\"kind\":\"step\",\"t\":1");  // crash
  {
    std::unique_ptr<TelemetryWriter> writer = open_writer(dir.path(), dir.file("proc"));
    ASSERT_TRUE(writer->write_step(sample_step(2)).ok());
  }
  Result<RankTelemetry> r = read_telemetry_file(path);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->steps[0].step.step, 1);
  EXPECT_EQ(r->steps[1].step.step, 2);
}

TEST(TelemetryWriter, WriteFailureIsReturnedAndKeptForClose) {
  TempDir dir;
  testing::write_fake_proc(dir.file("proc"));
  io::FaultInjectingEnv env(io::default_env());
  Result<std::unique_ptr<TelemetryWriter>> writer = TelemetryWriter::open(
      env, dir.path(), 0, "node07", MeshCoord{}, kNoPeriodicSamples, dir.file("proc"));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  env.fail_nth_write(1);
  EXPECT_FALSE((*writer)->write_step(sample_step(1)).ok());
  EXPECT_FALSE((*writer)->close().ok());
  EXPECT_FALSE((*writer)->write_step(sample_step(2)).ok());  // closed
}

TEST(TelemetryWriter, UnreadableProcIsReportedByClose) {
  TempDir dir;
  std::unique_ptr<TelemetryWriter> writer = open_writer(dir.path(), dir.file("no-proc"));
  ASSERT_NE(writer, nullptr);
  ASSERT_TRUE(writer->write_step(sample_step(1)).ok());
  Status closed = writer->close();
  EXPECT_FALSE(closed.ok());
  EXPECT_NE(closed.message().find("no-proc"), std::string::npos) << closed.message();
}

TEST(TraceWriter, EventsAreBufferedUntilFlushAndShiftedByTheClockOffset) {
  TempDir dir;
  Result<std::unique_ptr<TraceWriter>> writer =
      TraceWriter::open(io::default_env(), dir.path(), 1, /*clock_offset_s=*/0.5, "node02");
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  (*writer)->compute("fwd", 0, 2, 7, 100.0, 100.25);
  (*writer)->comm("allreduce", "dp", 12, 4096, 100.25, 100.5);
  EXPECT_EQ(testing::read_text((*writer)->path()).find("allreduce"), std::string::npos);
  ASSERT_TRUE((*writer)->flush().ok());

  Result<std::vector<TraceEvent>> events = read_trace_file((*writer)->path());
  ASSERT_TRUE(events.ok()) << events.status().to_string();
  ASSERT_EQ(events->size(), 2u);
  const TraceEvent& fwd = (*events)[0];
  EXPECT_FALSE(fwd.is_comm);
  EXPECT_EQ(fwd.op, "fwd");
  EXPECT_EQ(fwd.mb, 2);
  EXPECT_EQ(fwd.step, 7);
  EXPECT_DOUBLE_EQ(fwd.t0, 99.5);
  EXPECT_EQ(fwd.host, "node02");
  const TraceEvent& ar = (*events)[1];
  EXPECT_TRUE(ar.is_comm);
  EXPECT_EQ(ar.group, "dp");
  EXPECT_EQ(ar.seq, 12u);
  EXPECT_EQ(ar.bytes, 4096u);
  EXPECT_DOUBLE_EQ(ar.t1, 100.0);
}

TEST(TraceWriter, DestructorFlushes) {
  TempDir dir;
  {
    Result<std::unique_ptr<TraceWriter>> writer = TraceWriter::open(dir.path(), 0, 0.0);
    ASSERT_TRUE(writer.ok());
    (*writer)->compute("bwd", 1, 0, 3, 1.0, 2.0);
  }
  Result<std::vector<std::vector<TraceEvent>>> ranks = read_trace_dir(dir.path() + "/trace");
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  ASSERT_EQ(ranks->size(), 1u);
  ASSERT_EQ((*ranks)[0].size(), 1u);
  EXPECT_EQ((*ranks)[0][0].op, "bwd");
}

}  // namespace
}  // namespace ms::telemetry
