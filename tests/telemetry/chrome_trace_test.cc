// Chrome-trace export: complete events in microseconds from the first event, one process per
// rank (or per host with a thread per rank), and named rows.
#include "telemetry/chrome_trace.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace ms::telemetry {
namespace {

using nlohmann::json;

std::vector<std::vector<TraceEvent>> two_ranks_one_host() {
  TraceEvent fwd;
  fwd.rank = 0;
  fwd.op = "fwd";
  fwd.stage = 0;
  fwd.mb = 1;
  fwd.step = 2;
  fwd.t0 = 100.0;
  fwd.t1 = 100.5;
  fwd.host = "node1";
  TraceEvent ar;
  ar.rank = 1;
  ar.op = "allreduce";
  ar.is_comm = true;
  ar.group = "dp";
  ar.seq = 9;
  ar.bytes = 1024;
  ar.t0 = 100.25;
  ar.t1 = 101.0;
  ar.host = "node1";
  return {{fwd}, {ar}};
}

std::vector<json> complete_events(const json& doc) {
  std::vector<json> out;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "X") out.push_back(e);
  }
  return out;
}

TEST(ChromeTrace, CompleteEventsInMicrosecondsFromTheFirstEvent) {
  const json doc = json::parse(export_chrome_trace(two_ranks_one_host()));
  const std::vector<json> events = complete_events(doc);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["name"], "fwd");
  EXPECT_DOUBLE_EQ(events[0]["ts"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(events[0]["dur"].get<double>(), 500000);
  EXPECT_EQ(events[0]["pid"], 0);
  EXPECT_EQ(events[0]["tid"], 0);
  EXPECT_EQ(events[1]["cat"], "comm");
  EXPECT_DOUBLE_EQ(events[1]["ts"].get<double>(), 250000);
  EXPECT_EQ(events[1]["pid"], 1);
  EXPECT_EQ(events[1]["tid"], 1);
  EXPECT_EQ(events[1]["args"]["seq"], 9);
}

TEST(ChromeTrace, GroupingByHostPutsRanksOnThreadsOfOneProcess) {
  const json doc = json::parse(export_chrome_trace(two_ranks_one_host(), GroupBy::kHost));
  const std::vector<json> events = complete_events(doc);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0]["pid"], events[1]["pid"]);
  EXPECT_EQ(events[0]["tid"], 0);  // rank 0 compute
  EXPECT_EQ(events[1]["tid"], 3);  // rank 1 comm
  bool named_host = false;
  for (const json& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "node1") {
      named_host = true;
    }
  }
  EXPECT_TRUE(named_host);
}

TEST(ChromeTrace, EmptyTraceIsAValidDocument) {
  const json doc = json::parse(export_chrome_trace({}));
  EXPECT_TRUE(doc["traceEvents"].empty());
}

}  // namespace
}  // namespace ms::telemetry
