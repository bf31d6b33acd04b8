// JSON-line encoders of the telemetry and trace records and the machine-grouping helpers; the
// readers in reader.cc decode exactly these keys.
#include "telemetry/schema.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "core/rank_file.h"
#include "core/version.h"

namespace ms::telemetry {

using nlohmann::ordered_json;

namespace {

ordered_json mesh_json(MeshCoord mesh) {
  return ordered_json{{"dp", mesh.dp}, {"tp", mesh.tp}, {"pp", mesh.pp}, {"cp", mesh.cp}};
}

// Versions every artifact records: the format's and the toolkit's that wrote it.
void add_versions(ordered_json& j) {
  j["format_version"] = kFormatVersion;
  j["toolkit"] = std::string(version());
  j["git"] = std::string(git_revision());
}

}  // namespace

std::string host_record_json(const HostRecord& r) {
  ordered_json j;
  j["kind"] = "host";
  j["t"] = r.t;
  j["host"] = r.host;
  j["rank"] = r.rank;
  j["cpu_util"] = r.cpu_util;
  j["mem_used"] = r.mem_used;
  j["net_tx_bytes"] = r.net_tx_bytes;
  j["net_rx_bytes"] = r.net_rx_bytes;
  for (const auto& [key, value] : r.extra) {
    if (!j.contains(key)) j[key] = value;
  }
  return j.dump();
}

std::string step_record_json(const StepRecordRead& r) {
  const StepRecord& s = r.step;
  ordered_json j;
  j["kind"] = "step";
  j["t"] = r.t;
  j["host"] = r.host;
  j["rank"] = r.rank;
  j["mesh"] = mesh_json(r.mesh);
  j["step"] = s.step;
  j["loss"] = s.loss;
  j["grad_norm"] = s.grad_norm;
  j["lr"] = s.lr;
  j["tokens_per_s"] = s.tokens_per_s;
  j["step_s"] = s.step_s;
  j["phases"] = ordered_json{{"data_s", s.phases.data_s},
                             {"fwd_s", s.phases.fwd_s},
                             {"bwd_s", s.phases.bwd_s},
                             {"comm_wait_s", s.phases.comm_wait_s},
                             {"optim_s", s.phases.optim_s}};
  if (!s.expert_tokens.empty()) j["expert_tokens"] = s.expert_tokens;
  if (!s.dropped_tokens.empty()) j["dropped_tokens"] = s.dropped_tokens;
  return j.dump();
}

std::string telemetry_meta_json(int rank, const std::string& host, MeshCoord mesh) {
  ordered_json j;
  j["kind"] = "meta";
  j["format"] = "ms-telemetry";
  add_versions(j);
  j["rank"] = rank;
  j["host"] = host;
  j["mesh"] = mesh_json(mesh);
  return j.dump();
}

std::string trace_clock_json(int rank, const std::string& host, double clock_offset_s) {
  ordered_json j;
  j["kind"] = "clock";
  j["offset_s"] = clock_offset_s;
  j["rank"] = rank;
  j["host"] = host;
  j["format"] = "ms-trace";
  add_versions(j);
  return j.dump();
}

std::string compute_event_json(int rank, std::string_view op, int stage, int mb, int64_t step,
                               double t0, double t1) {
  ordered_json j;
  j["kind"] = "compute";
  j["rank"] = rank;
  j["op"] = op;
  j["stage"] = stage;
  j["mb"] = mb;
  j["step"] = step;
  j["t0"] = t0;
  j["t1"] = t1;
  return j.dump();
}

std::string comm_event_json(int rank, std::string_view op, std::string_view group, uint64_t seq,
                            uint64_t bytes, double t0, double t1) {
  ordered_json j;
  j["kind"] = "comm";
  j["rank"] = rank;
  j["op"] = op;
  j["group"] = group;
  j["seq"] = seq;
  j["bytes"] = bytes;
  j["t0"] = t0;
  j["t1"] = t1;
  return j.dump();
}

std::string rank_file_path(const std::string& dir, int rank) {
  return dir + "/" + rank_file_name(rank, ".jsonl");
}

Result<GroupBy> parse_group_by(std::string_view text) {
  if (text == "rank") return GroupBy::kRank;
  if (text == "host") return GroupBy::kHost;
  return InvalidArgument("unknown grouping '" + std::string(text) +
                         "': use 'host' (one machine per host) or 'rank' (one per rank)");
}

std::string_view group_by_name(GroupBy group_by) {
  return group_by == GroupBy::kHost ? "host" : "rank";
}

std::string group_key(const std::string& host, int rank, GroupBy group_by) {
  if (group_by == GroupBy::kHost) return host;
  return "rank" + std::to_string(rank);
}

std::string group_key(const HostRecord& record, GroupBy group_by) {
  return group_key(record.host, record.rank, group_by);
}

std::string group_key(const StepRecordRead& record, GroupBy group_by) {
  return group_key(record.host, record.rank, group_by);
}

std::string group_key(const TraceEvent& event, GroupBy group_by) {
  return group_key(event.host, event.rank, group_by);
}

}  // namespace ms::telemetry
