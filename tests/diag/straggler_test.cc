// Straggler what-if analysis: the replay reproduces measured traces (hand-made and simulated,
// through the trace files and their clock offsets), the waste is attributed to the slowed
// worker, broken traces are named, and the heatmap SVG is well-formed.
#include "diag/straggler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "diag/simulate.h"
#include "diag/svg.h"
#include "telemetry/reader.h"

namespace ms::diag {
namespace {

telemetry::TraceEvent compute(int rank, const char* op, int stage, int64_t step, double t0, double t1) {
  telemetry::TraceEvent e;
  e.rank = rank;
  e.op = op;
  e.stage = stage;
  e.mb = 0;
  e.step = step;
  e.t0 = t0;
  e.t1 = t1;
  return e;
}

telemetry::TraceEvent comm(int rank, const char* op, const char* group, uint64_t seq, double t0, double t1) {
  telemetry::TraceEvent e;
  e.rank = rank;
  e.op = op;
  e.is_comm = true;
  e.group = group;
  e.seq = seq;
  e.bytes = 1024;
  e.t0 = t0;
  e.t1 = t1;
  return e;
}

TEST(ReplayTest, ReproducesAHandMadeTraceExactly) {
  // Rank 0 computes then posts a nonblocking send; rank 1 starts waiting early, the message
  // lands 0.5 s after the post, then rank 1 computes.
  const std::vector<std::vector<telemetry::TraceEvent>> traces = {
      {compute(0, "fwd", 0, 0, 0.0, 1.0), comm(0, "send", "pp.0-1", 0, 1.0, 1.0)},
      {comm(1, "recv", "pp.0-1", 0, 0.2, 1.5), compute(1, "fwd", 1, 0, 1.5, 2.5)}};
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_TRUE(program.ok());
  EXPECT_DOUBLE_EQ((*program)[1][0].gap_s, 0.2);
  EXPECT_DOUBLE_EQ((*program)[0][1].duration_s, 0.0);  // the sender does not wait
  EXPECT_DOUBLE_EQ((*program)[1][0].duration_s, 0.5);  // the transfer: recv t1 - send post
  EXPECT_EQ((*program)[1][0].step, 0);                  // from the compute after it
  Result<ReplayTimes> times = replay(*program, 0.0);
  ASSERT_TRUE(times.ok());
  EXPECT_DOUBLE_EQ(times->makespan(), 2.5);
  EXPECT_DOUBLE_EQ(times->end[1][0], 1.5);
  EXPECT_DOUBLE_EQ(times->end[0][1], 1.0);
  EXPECT_DOUBLE_EQ(measured_makespan(traces), 2.5);
}

// Each distinct op type costs a full replay: 10,000 events with 10,000 op names would replay
// 1e8 events, so the analysis is refused up front instead of running for minutes.
TEST(StragglerTest, ATraceWithThousandsOfOpTypesIsRefusedUpFront) {
  std::vector<std::vector<telemetry::TraceEvent>> traces(1);
  std::vector<std::string> names;
  for (int i = 0; i < 10000; ++i) names.push_back("op" + std::to_string(i));
  for (int i = 0; i < 10000; ++i) {
    traces[0].push_back(compute(0, names[i].c_str(), 0, 0, i * 1.0, i * 1.0 + 0.5));
  }
  Result<StragglerReport> report = analyze_stragglers(traces);
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(report.status().message().find("10000 op types"), std::string::npos)
      << report.status().message();
}

TEST(ReplayTest, ACollectiveSeenOnOneRankIsCorruption) {
  const std::vector<std::vector<telemetry::TraceEvent>> traces = {
      {comm(0, "allreduce", "dp.pp0", 7, 0, 1)}, {compute(1, "fwd", 0, 0, 0, 1)}};
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_FALSE(program.ok());
  EXPECT_NE(program.status().message().find("dp.pp0#7"), std::string::npos);
}

TEST(ReplayTest, CrossedCollectivesAreADeadlockNamingTheRanks) {
  const std::vector<std::vector<telemetry::TraceEvent>> traces = {
      {comm(0, "allreduce", "a", 0, 0, 1), comm(0, "allreduce", "b", 0, 1, 2)},
      {comm(1, "allreduce", "b", 0, 0, 1), comm(1, "allreduce", "a", 0, 1, 2)}};
  Result<ReplayProgram> program = build_program(traces);
  ASSERT_TRUE(program.ok());
  Result<ReplayTimes> times = replay(*program, 0);
  ASSERT_FALSE(times.ok());
  EXPECT_NE(times.status().message().find("rank 1 in allreduce b#0"), std::string::npos)
      << times.status().message();
}

// Simulated traces written with per-rank clock offsets and read back by the trace reader.
std::vector<std::vector<telemetry::TraceEvent>> simulated(int slow_rank, double factor) {
  TraceSimSpec spec;
  spec.slow_rank = slow_rank;
  spec.slow_factor = factor;
  spec.seed = 17;
  Result<std::vector<std::vector<telemetry::TraceEvent>>> traces = simulate_traces(spec);
  EXPECT_TRUE(traces.ok()) << traces.status().to_string();
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ms_straggler_test_" + std::to_string(getpid()))).string();
  EXPECT_TRUE(write_traces(*traces, spec, dir).ok());
  auto read = telemetry::read_trace_dir(dir + "/trace");
  EXPECT_TRUE(read.ok()) << read.status().to_string();
  std::filesystem::remove_all(dir);
  return std::move(read).value();
}

TEST(StragglerTest, ReplayOfARecordedTraceMatchesItsMeasuredTimeWithin5Percent) {
  Result<StragglerReport> report = analyze_stragglers(simulated(2, 1.5));
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_LT(std::fabs(report->replay_error()), 0.05);
  EXPECT_EQ(report->ranks, 4);
  EXPECT_EQ(report->steps.size(), 6u);
}

TEST(StragglerTest, TheWasteIsAttributedToTheSlowedWorkerAndItsStage) {
  Result<StragglerReport> report = analyze_stragglers(simulated(2, 1.5));
  ASSERT_TRUE(report.ok());
  EXPECT_GT(report->slowdown, 1.1);
  const auto top = std::max_element(report->workers.begin(), report->workers.end(),
                                    [](const WhatIf& a, const WhatIf& b) { return a.share < b.share; });
  EXPECT_EQ(top->name, "rank 2");
  EXPECT_GT(top->share, 0.7);
  ASSERT_EQ(report->stages.size(), 2u);
  EXPECT_GT(report->stages[1].share, report->stages[0].share);  // rank 2 is on stage 1
  for (size_t s = 0; s < report->steps.size(); ++s) {
    for (int r = 0; r < 4; ++r) {
      if (r != 2) {
        EXPECT_GT(report->heatmap[2][s], report->heatmap[r][s]);
      }
    }
  }
}

// One pipeline (dp 1) whose stage-2 host idles 50 ms before each compute op, as the trainer's
// debug.slow_ms does and as a stalled host would: the stage is alone in its duration group, so
// only its gaps, compared with the other stages' gaps, can name it.
TEST(StragglerTest, AStalledHostOnASinglePipelineIsNamedFromItsGaps) {
  TraceSimSpec spec;
  spec.dp = 1;
  spec.pp = 4;
  spec.slow_rank = 2;
  spec.slow_factor = 1.0;
  spec.slow_gap_s = 0.050;
  spec.seed = 5;
  Result<std::vector<std::vector<telemetry::TraceEvent>>> traces = simulate_traces(spec);
  ASSERT_TRUE(traces.ok()) << traces.status().to_string();
  Result<StragglerReport> report = analyze_stragglers(*traces);
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_GT(report->slowdown, 1.5);
  const auto top = std::max_element(report->workers.begin(), report->workers.end(),
                                    [](const WhatIf& a, const WhatIf& b) { return a.share < b.share; });
  EXPECT_EQ(top->name, "rank 2");
  EXPECT_GT(top->share, 0.8);
  for (const WhatIf& w : report->workers) {
    if (w.name != "rank 2") {
      EXPECT_LT(w.share, 0.2) << w.name;
    }
  }
}

TEST(StragglerTest, ABalancedJobHasLittleSlowdown) {
  Result<StragglerReport> report = analyze_stragglers(simulated(-1, 1.0));
  ASSERT_TRUE(report.ok());
  EXPECT_LT(report->slowdown, 1.1);
  EXPECT_TRUE(straggler_report_json(*report).contains("heatmap"));
}

TEST(SvgTest, HeatmapIsWellFormedWithEscapedLabels) {
  Heatmap h;
  h.title = "slow <workers> & co";
  h.row_labels = {"rank 0", "rank \"1\""};
  h.column_labels = {"0", "1", "2"};
  h.values = {{1.0, 1.1, 1.0}, {1.5, 2.0, 1.2}};
  const std::string svg = heatmap_svg(h);
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_NE(svg.find("slow &lt;workers&gt; &amp; co"), std::string::npos);
  EXPECT_NE(svg.find("rank &quot;1&quot;"), std::string::npos);
  auto count = [&](const std::string& s) {
    size_t n = 0;
    for (size_t at = svg.find(s); at != std::string::npos; at = svg.find(s, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<rect"), 6u + 11u);  // cells + legend
  EXPECT_EQ(count("<title>"), count("</title>"));
  EXPECT_EQ(count("<text"), count("</text>"));
  EXPECT_EQ(count("<rect") - 11, count("</rect>"));
  const std::string html = html_page("report", "a < b", svg);
  EXPECT_NE(html.find("<pre>a &lt; b</pre>"), std::string::npos);
  EXPECT_NE(html.find(svg), std::string::npos);
}

}  // namespace
}  // namespace ms::diag
