// Chrome trace-event export (the "JSON Array/Object Format" Perfetto reads): complete events
// with microsecond timestamps, and metadata events naming each process and thread row.
#include "telemetry/chrome_trace.h"

#include <limits>
#include <map>
#include <nlohmann/json.hpp>

namespace ms::telemetry {

namespace {

using nlohmann::ordered_json;

// Process and thread ids of one event's row.
struct Row {
  int pid = 0;
  int tid = 0;
};

// Rank mode: one process per rank, thread 0 compute and thread 1 communication. Host mode: one
// process per host, threads 2*rank (compute) and 2*rank+1 (communication).
Row row_of(const TraceEvent& e, GroupBy group_by, const std::map<std::string, int>& host_ids) {
  const int lane = e.is_comm ? 1 : 0;
  if (group_by == GroupBy::kRank) return {e.rank, lane};
  return {host_ids.at(group_key(e, GroupBy::kHost)), 2 * e.rank + lane};
}

ordered_json metadata(const char* what, int pid, int tid, const std::string& name) {
  return ordered_json{{"name", what}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
                      {"args", ordered_json{{"name", name}}}};
}

ordered_json event_args(const TraceEvent& e) {
  ordered_json args;
  args["rank"] = e.rank;
  if (e.is_comm) {
    args["group"] = e.group;
    args["seq"] = e.seq;
    args["bytes"] = e.bytes;
  } else {
    args["stage"] = e.stage;
    args["mb"] = e.mb;
    args["step"] = e.step;
  }
  return args;
}

double earliest_start(const std::vector<std::vector<TraceEvent>>& ranks) {
  double t = std::numeric_limits<double>::infinity();
  for (const auto& events : ranks) {
    for (const TraceEvent& e : events) t = std::min(t, e.t0);
  }
  return t == std::numeric_limits<double>::infinity() ? 0 : t;
}

// Host names get process ids in name order; an unknown host is "?".
std::map<std::string, int> host_ids(const std::vector<std::vector<TraceEvent>>& ranks) {
  std::map<std::string, int> ids;
  for (const auto& events : ranks) {
    for (const TraceEvent& e : events) ids.emplace(group_key(e, GroupBy::kHost), 0);
  }
  int next = 0;
  for (auto& [host, id] : ids) id = next++;
  return ids;
}

void add_row_names(ordered_json& out, const std::vector<std::vector<TraceEvent>>& ranks,
                   GroupBy group_by, const std::map<std::string, int>& hosts) {
  for (const auto& [host, id] : hosts) {
    if (group_by == GroupBy::kHost) out.push_back(metadata("process_name", id, 0, host));
  }
  for (const auto& events : ranks) {
    if (events.empty()) continue;
    const TraceEvent& first = events.front();
    const std::string rank = "rank " + std::to_string(first.rank);
    TraceEvent probe = first;
    probe.is_comm = false;
    const Row compute = row_of(probe, group_by, hosts);
    probe.is_comm = true;
    const Row comm = row_of(probe, group_by, hosts);
    if (group_by == GroupBy::kRank) out.push_back(metadata("process_name", compute.pid, 0, rank));
    out.push_back(metadata("thread_name", compute.pid, compute.tid, rank + " compute"));
    out.push_back(metadata("thread_name", comm.pid, comm.tid, rank + " comm"));
  }
}

}  // namespace

std::string export_chrome_trace(const std::vector<std::vector<TraceEvent>>& ranks,
                                GroupBy group_by) {
  const double origin = earliest_start(ranks);
  const std::map<std::string, int> hosts = host_ids(ranks);
  ordered_json events = ordered_json::array();
  add_row_names(events, ranks, group_by, hosts);
  for (const auto& rank_events : ranks) {
    for (const TraceEvent& e : rank_events) {
      const Row row = row_of(e, group_by, hosts);
      ordered_json j;
      j["name"] = e.op;
      j["cat"] = e.is_comm ? "comm" : "compute";
      j["ph"] = "X";
      j["ts"] = (e.t0 - origin) * 1e6;
      j["dur"] = (e.t1 - e.t0) * 1e6;
      j["pid"] = row.pid;
      j["tid"] = row.tid;
      j["args"] = event_args(e);
      events.push_back(std::move(j));
    }
  }
  ordered_json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  return doc.dump();
}

}  // namespace ms::telemetry
