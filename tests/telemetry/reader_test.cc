// The readers as the specification of what a valid telemetry or trace file is: unknown keys and
// kinds are ignored, a torn last line is skipped, and anything else malformed is an error that
// names file:line and the key.
#include "telemetry/reader.h"

#include <gtest/gtest.h>

#include "tests/telemetry/telemetry_test_util.h"

namespace ms::telemetry {
namespace {

using testing::TempDir;

const char* kMeta =
    R"({"kind":"meta","format":"ms-telemetry","format_version":1,"rank":0,"host":"a"})";
const char* kHost =
    R"({"kind":"host","t":10.0,"host":"a","rank":0,"cpu_util":0.5,"mem_used":100,)"
    R"("net_tx_bytes":7,"net_rx_bytes":8,"pause_frames":3,"note":"text is ignored"})";
const char* kStep =
    R"({"kind":"step","t":11.0,"host":"a","rank":0,"mesh":{"dp":0,"tp":1,"pp":0},"step":5,)"
    R"("loss":2.0,"step_s":0.5,"future_key":[1,2]})";

std::string lines(std::initializer_list<std::string> records) {
  std::string text;
  for (const std::string& r : records) text += r + "\n";
  return text;
}

TEST(TelemetryReader, IgnoresUnknownKeysAndKindsAndKeepsExtraNumbers) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({kMeta, kHost, R"({"kind":"gpu_event","x":1})", kStep}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  const RankTelemetry& r = ranks->front();
  ASSERT_EQ(r.hosts.size(), 1u);
  EXPECT_DOUBLE_EQ(r.hosts[0].extra.at("pause_frames"), 3);
  EXPECT_EQ(r.hosts[0].extra.count("note"), 0u);
  ASSERT_EQ(r.steps.size(), 1u);
  EXPECT_EQ(r.steps[0].mesh.tp, 1);
  EXPECT_DOUBLE_EQ(r.steps[0].step.grad_norm, 0);  // optional, absent
}

TEST(TelemetryReader, MalformedLineIsAnErrorNamingFileAndLine) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kMeta, "{not json", kStep}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ranks.status().message().find("rank-00000.jsonl:2"), std::string::npos)
      << ranks.status().message();
}

TEST(TelemetryReader, TruncatedLastLineIsSkipped) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kMeta, kHost}) + R"({"kind":"st)");
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  EXPECT_EQ(ranks->front().hosts.size(), 1u);
}

TEST(TelemetryReader, MissingRequiredKeyIsNamed) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({R"({"kind":"step","t":1,"host":"a","rank":0,"mesh":{"dp":0,"tp":0,"pp":0},"step":1,"step_s":1})"}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.status().message().find(":1: key 'loss'"), std::string::npos)
      << ranks.status().message();
}

TEST(TelemetryReader, MeshContextParallelRankIsOptionalButTyped) {
  TempDir dir;
  const std::string with_cp =
      R"({"kind":"step","t":12.0,"host":"a","rank":0,"mesh":{"dp":0,"tp":1,"pp":0,"cp":1},)"
      R"("step":6,"loss":2.0,"step_s":0.5})";
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kMeta, kStep, with_cp}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  ASSERT_EQ(ranks->front().steps.size(), 2u);
  EXPECT_EQ(ranks->front().steps[0].mesh.cp, 0);  // written before cp existed
  EXPECT_EQ(ranks->front().steps[1].mesh.cp, 1);

  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({R"({"kind":"step","t":1,"host":"a","rank":0,"mesh":{"dp":0,"tp":0,)"
                             R"("pp":0,"cp":"one"},"step":1,"loss":1,"step_s":1})"}));
  ranks = read_telemetry_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.status().message().find("key 'cp'"), std::string::npos)
      << ranks.status().message();
}

TEST(TelemetryReader, WrongTypeIsAnError) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({R"({"kind":"host","t":"soon","host":"a","rank":0})"}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_NE(ranks.status().message().find("'t'"), std::string::npos);
}

TEST(TelemetryReader, NewerFormatVersionIsRefused) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({R"({"kind":"meta","format_version":2})", kHost}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), StatusCode::kFailedPrecondition);
}

TEST(TelemetryReader, RanksAreOrderedAndMustBeDistinct) {
  TempDir dir;
  std::string host1 = kHost;
  host1.replace(host1.find("\"rank\":0"), 8, "\"rank\":1");
  testing::write_text(dir.file("rank-00001.jsonl"), lines({host1}));
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kHost}));
  testing::write_text(dir.file("notes.txt"), "not a rank file");
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  ASSERT_EQ(ranks->size(), 2u);
  EXPECT_EQ((*ranks)[1].rank, 1);

  testing::write_text(dir.file("rank-00002.jsonl"), lines({host1}));
  EXPECT_EQ(read_telemetry_dir(dir.path()).status().code(), StatusCode::kCorruption);
}

TEST(TelemetryReader, MissingOrEmptyDirectoryIsNotFound) {
  TempDir dir;
  EXPECT_EQ(read_telemetry_dir(dir.file("absent")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_telemetry_dir(dir.path()).status().code(), StatusCode::kNotFound);
}

const char* kClock1 = R"({"kind":"clock","offset_s":2.0,"rank":1,"host":"b","format_version":1})";
const char* kClock0 = R"({"kind":"clock","offset_s":0,"rank":0,"format_version":1})";

TEST(TraceReader, AppliesClockOffsetInfersKindAndSortsByStart) {
  TempDir dir;
  testing::write_text(
      dir.file("rank-00001.jsonl"),
      lines({kClock1,
             R"({"rank":1,"op":"allreduce","group":"dp","seq":4,"bytes":64,"t0":15,"t1":16})",
             R"({"rank":1,"op":"fwd","stage":0,"mb":1,"step":3,"t0":12,"t1":14})"}));
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kClock0}));
  Result<std::vector<std::vector<TraceEvent>>> ranks = read_trace_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  ASSERT_EQ(ranks->size(), 2u);
  EXPECT_TRUE((*ranks)[0].empty());
  const std::vector<TraceEvent>& r1 = (*ranks)[1];
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].op, "fwd");
  EXPECT_DOUBLE_EQ(r1[0].t0, 10);
  EXPECT_TRUE(r1[1].is_comm);
  EXPECT_DOUBLE_EQ(r1[1].t1, 14);
  EXPECT_EQ(r1[1].host, "b");
}

TEST(TraceReader, EventBeforeClockIsAnError) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({R"({"rank":0,"op":"fwd","t0":1,"t1":2})", kClock0}));
  Result<std::vector<TraceEvent>> events = read_trace_file(dir.file("rank-00000.jsonl"));
  ASSERT_FALSE(events.ok());
  EXPECT_NE(events.status().message().find(":1:"), std::string::npos);
}

TEST(TraceReader, EndBeforeStartIsAnError) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({kClock0, R"({"rank":0,"op":"fwd","t0":2,"t1":1})"}));
  EXPECT_EQ(read_trace_file(dir.file("rank-00000.jsonl")).status().code(),
            StatusCode::kCorruption);
}

TEST(TraceReader, AMissingRankIsNamed) {
  TempDir dir;
  testing::write_text(dir.file("rank-00001.jsonl"), lines({kClock1}));
  Result<std::vector<std::vector<TraceEvent>>> ranks = read_trace_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), StatusCode::kNotFound);
}

TEST(TelemetryReader, ATimeBeyondAnyClockIsRefusedNamingFileLineAndKey) {
  TempDir dir;
  std::string absurd = kHost;
  absurd.replace(absurd.find("\"t\":10.0"), 8, "\"t\":1e300");
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kMeta, kHost, absurd}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), StatusCode::kCorruption);
  EXPECT_NE(ranks.status().message().find("rank-00000.jsonl:3: key 't' = 1e+300"),
            std::string::npos)
      << ranks.status().message();
}

TEST(TelemetryReader, RecordsKnowTheirFileAndLine) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"), lines({kMeta, kHost, kStep}));
  Result<RankTelemetry> r = read_telemetry_file(dir.file("rank-00000.jsonl"));
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->path, dir.file("rank-00000.jsonl"));
  EXPECT_EQ(r->hosts.at(0).line, 2u);
  EXPECT_EQ(r->steps.at(0).line, 3u);
}

TEST(TraceReader, AnAbsurdClockOffsetIsRefused) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({R"({"kind":"clock","offset_s":-2e11,"rank":0,"format_version":1})"}));
  Result<std::vector<TraceEvent>> events = read_trace_file(dir.file("rank-00000.jsonl"));
  ASSERT_FALSE(events.ok());
  EXPECT_NE(events.status().message().find(":1: key 'offset_s'"), std::string::npos)
      << events.status().message();
}

TEST(TraceReader, ATimestampFarFromTheOthersIsRefusedNamingBothEvents) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({kClock0, R"({"rank":0,"op":"fwd","t0":100,"t1":101})"}));
  testing::write_text(
      dir.file("rank-00001.jsonl"),
      lines({R"({"kind":"clock","offset_s":0,"rank":1,"format_version":1})",
             R"({"rank":1,"op":"fwd","t0":100,"t1":101})",
             R"({"rank":1,"op":"fwd","t0":102,"t1":100000102})"}));
  Result<std::vector<std::vector<TraceEvent>>> ranks = read_trace_dir(dir.path());
  ASSERT_FALSE(ranks.ok());
  EXPECT_EQ(ranks.status().code(), StatusCode::kCorruption);
  const std::string& m = ranks.status().message();
  EXPECT_NE(m.find("rank-00001.jsonl:3: key 't1'"), std::string::npos) << m;
  EXPECT_NE(m.find("rank-00000.jsonl:2"), std::string::npos) << m;
}

TEST(TraceReader, ASpanOfAFewDaysIsAccepted) {
  TempDir dir;
  testing::write_text(dir.file("rank-00000.jsonl"),
                      lines({kClock0, R"({"rank":0,"op":"fwd","t0":100,"t1":101})",
                             R"({"rank":0,"op":"fwd","t0":400000,"t1":400001})"}));
  Result<std::vector<std::vector<TraceEvent>>> ranks = read_trace_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  EXPECT_EQ(ranks->at(0).at(1).line, 3u);
}

// A step record of kStep's keys plus `moe_keys` (",\"expert_tokens\":...").
std::string step_with(const std::string& moe_keys) {
  return R"({"kind":"step","t":11.0,"host":"a","rank":0,"mesh":{"dp":0,"tp":0,"pp":0},)"
         R"("step":5,"loss":2.0,"step_s":0.5)" +
         moe_keys + "}";
}

TEST(TelemetryReader, MoeCountsAreOptional) {
  TempDir dir;
  testing::write_text(
      dir.file("rank-00000.jsonl"),
      lines({kMeta, kStep, step_with(R"(,"expert_tokens":[[1,2],[3,0]],"dropped_tokens":[0,7])"),
             step_with(R"(,"expert_tokens":[[4,4]])")}));
  Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
  ASSERT_TRUE(ranks.ok()) << ranks.status().to_string();
  const std::vector<StepRecordRead>& steps = ranks->front().steps;
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_TRUE(steps[0].step.expert_tokens.empty());  // a dense step, or an older writer
  EXPECT_EQ(steps[1].step.expert_tokens, (std::vector<std::vector<int64_t>>{{1, 2}, {3, 0}}));
  EXPECT_EQ(steps[1].step.dropped_tokens, (std::vector<int64_t>{0, 7}));
  EXPECT_EQ(steps[2].step.expert_tokens, (std::vector<std::vector<int64_t>>{{4, 4}}));
  EXPECT_TRUE(steps[2].step.dropped_tokens.empty());  // dropped_tokens alone may be left out
}

TEST(TelemetryReader, MalformedMoeCountsAreRefusedNamingFileLineAndKey) {
  struct Case {
    const char* keys;
    const char* key;
    const char* detail;
  };
  const Case cases[] = {
      {R"(,"expert_tokens":7)", "expert_tokens", "it is number"},
      {R"(,"expert_tokens":[1,2])", "expert_tokens", "layer 0 is not a list"},
      {R"(,"expert_tokens":[[1,-2]])", "expert_tokens", "layer 0 entry 1 is -2"},
      {R"(,"expert_tokens":[[1,2.5]])", "expert_tokens", "layer 0 entry 1 is 2.5"},
      {R"(,"expert_tokens":[[1,"2"]])", "expert_tokens", "layer 0 entry 1 is \"2\""},
      {R"(,"expert_tokens":[[1,2],[3]])", "expert_tokens", "layer 1 has 1 experts, layer 0 has 2"},
      {R"(,"expert_tokens":[[1,2],[]])", "expert_tokens", "layer 1 has no experts"},
      {R"(,"expert_tokens":[[18446744073709551615]])", "expert_tokens", "layer 0 entry 0"},
      {R"(,"expert_tokens":[[1],[2]],"dropped_tokens":3)", "dropped_tokens", "is not a list"},
      {R"(,"expert_tokens":[[1],[2]],"dropped_tokens":[0,-1])", "dropped_tokens",
       "entry 1 is -1"},
      {R"(,"expert_tokens":[[1],[2]],"dropped_tokens":[0])", "dropped_tokens",
       "it has 1 entries, 'expert_tokens' 2 layers"},
      {R"(,"dropped_tokens":[0])", "dropped_tokens", "'expert_tokens' 0 layers"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    testing::write_text(dir.file("rank-00000.jsonl"), lines({kMeta, kStep, step_with(c.keys)}));
    Result<std::vector<RankTelemetry>> ranks = read_telemetry_dir(dir.path());
    ASSERT_FALSE(ranks.ok()) << c.keys;
    EXPECT_EQ(ranks.status().code(), StatusCode::kCorruption) << c.keys;
    const std::string& message = ranks.status().message();
    EXPECT_NE(message.find("rank-00000.jsonl:3: key '" + std::string(c.key) + "'"),
              std::string::npos)
        << c.keys << ": " << message;
    EXPECT_NE(message.find(c.detail), std::string::npos) << c.keys << ": " << message;
  }
}

TEST(GroupKey, HostOrRank) {
  HostRecord r;
  r.host = "node07";
  r.rank = 5;
  EXPECT_EQ(group_key(r, GroupBy::kHost), "node07");
  EXPECT_EQ(group_key(r, GroupBy::kRank), "rank5");
  EXPECT_EQ(*parse_group_by("host"), GroupBy::kHost);
  EXPECT_EQ(*parse_group_by("rank"), GroupBy::kRank);
  EXPECT_EQ(parse_group_by("node").status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ms::telemetry
