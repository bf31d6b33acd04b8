// Reading and writing cluster files; see cluster.h and docs/plan.md for the keys.
#include "plan/cluster.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <set>

#include "io/atomic_file.h"

namespace ms::plan {
namespace {

// Reads one mapping, remembering which keys were read so that unknown ones are refused (a
// misspelt key must not silently fall back to a default).
class MapReader {
 public:
  MapReader(const YAML::Node& node, std::string path, const std::string& file)
      : node_(node), path_(std::move(path)), file_(file) {}

  Status check_is_map() const {
    if (node_ && !node_.IsMap())
      return error(path_.empty() ? "(top level)" : path_, "must be a mapping");
    return Status::OK();
  }
  bool has(const std::string& key) {
    seen_.insert(key);
    return node_ && node_[key];
  }
  YAML::Node child(const std::string& key) {
    seen_.insert(key);
    return node_ ? node_[key] : YAML::Node();
  }
  std::string key(const std::string& k) const { return path_.empty() ? k : path_ + "." + k; }

  Result<double> number(const std::string& k, bool required, double fallback, double min_value) {
    if (!has(k)) {
      if (required) return error(key(k), "is required");
      return fallback;
    }
    double value = 0;
    try {
      value = node_[k].as<double>();
    } catch (const YAML::Exception&) {
      return error(key(k), "must be a number");
    }
    if (!std::isfinite(value) || value < min_value) {
      return error(key(k),
                   "must be at least " + format(min_value) + " (got " + format(value) + ")");
    }
    return value;
  }
  Result<int> integer(const std::string& k, bool required, int fallback, int min_value) {
    if (!has(k)) {
      if (required) return error(key(k), "is required");
      return fallback;
    }
    int value = 0;
    try {
      value = node_[k].as<int>();
    } catch (const YAML::Exception&) {
      return error(key(k), "must be an integer");
    }
    if (value < min_value) {
      return error(key(k), "must be at least " + std::to_string(min_value) + " (got " +
                               std::to_string(value) + ")");
    }
    return value;
  }
  Result<std::string> text(const std::string& k, bool required, const std::string& fallback) {
    if (!has(k)) {
      if (required) return error(key(k), "is required");
      return fallback;
    }
    try {
      return node_[k].as<std::string>();
    } catch (const YAML::Exception&) {
      return error(key(k), "must be a string");
    }
  }
  Result<bool> boolean(const std::string& k, bool fallback) {
    if (!has(k)) return fallback;
    try {
      return node_[k].as<bool>();
    } catch (const YAML::Exception&) {
      return error(key(k), "must be true or false");
    }
  }
  // InvalidArgument for the first key not in `known`: checked before any value, so that a
  // misspelt key is reported as such rather than as the missing key it was meant to be.
  Status refuse_keys_other_than(std::initializer_list<const char*> known) const {
    if (!node_ || !node_.IsMap()) return Status::OK();
    for (const auto& entry : node_) {
      const std::string k = entry.first.as<std::string>();
      if (std::none_of(known.begin(), known.end(), [&](const char* n) { return k == n; })) {
        return error(key(k), "is not a cluster-file key (docs/plan.md lists them)");
      }
    }
    return Status::OK();
  }
  // InvalidArgument for the first key that was never read.
  Status refuse_unknown() const {
    if (!node_ || !node_.IsMap()) return Status::OK();
    for (const auto& entry : node_) {
      const std::string k = entry.first.as<std::string>();
      if (!seen_.count(k))
        return error(key(k), "is not a cluster-file key (docs/plan.md lists them)");
    }
    return Status::OK();
  }
  Status error(const std::string& key_path, const std::string& what) const {
    return InvalidArgument(file_ + ": " + key_path + " " + what);
  }
  static std::string format(double v) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", v);
    return buf;
  }

 private:
  YAML::Node node_;
  std::string path_;
  const std::string& file_;
  std::set<std::string> seen_;
};

Result<Link> read_link(MapReader& parent, const std::string& name, const std::string& file) {
  MapReader r(parent.child(name), parent.key(name), file);
  if (!parent.has(name))
    return r.error(parent.key(name), "is required (bandwidth_gbs, latency_us)");
  MS_RETURN_IF_ERROR(r.check_is_map());
  MS_RETURN_IF_ERROR(r.refuse_keys_other_than({"bandwidth_gbs", "latency_us"}));
  Link link;
  MS_ASSIGN_OR_RETURN(link.bandwidth_gbs, r.number("bandwidth_gbs", true, 0, 1e-6));
  MS_ASSIGN_OR_RETURN(link.latency_us, r.number("latency_us", true, 0, 0));
  MS_RETURN_IF_ERROR(r.refuse_unknown());
  return link;
}

Status read_gemm(MapReader& device, GemmCurve& gemm, const std::string& file) {
  MapReader r(device.child("gemm_efficiency"), device.key("gemm_efficiency"), file);
  MS_RETURN_IF_ERROR(r.check_is_map());
  MS_ASSIGN_OR_RETURN(gemm.max, r.number("max", false, 1.0, 1e-6));
  if (gemm.max > 1) return r.error(r.key("max"), "must be at most 1 (a fraction of the peak)");
  MS_ASSIGN_OR_RETURN(gemm.half_gflop, r.number("half_gflop", false, 0, 0));
  MS_RETURN_IF_ERROR(r.refuse_unknown());
  const YAML::Node points = device.child("gemm_points");
  if (!points) return Status::OK();
  if (!points.IsSequence())
    return r.error(device.key("gemm_points"), "must be a list of [gflop, gflop_per_s]");
  for (size_t i = 0; i < points.size(); ++i) {
    const std::string where = device.key("gemm_points") + "[" + std::to_string(i) + "]";
    try {
      const double f = points[i][0].as<double>(), rate = points[i][1].as<double>();
      if (!(f > 0) || !(rate > 0) || points[i].size() != 2) throw YAML::Exception({}, "");
      gemm.points.emplace_back(f, rate);
    } catch (const YAML::Exception&) {
      return r.error(where, "must be [gflop, gflop_per_s], both positive");
    }
  }
  std::sort(gemm.points.begin(), gemm.points.end());
  return Status::OK();
}

// True when `dims` is exactly `count` unsigned decimal numbers joined by 'x' ("4x128x64"), each
// positive, or zero where `zero_allowed_last` and it is the last (an attention window of 0: the
// whole sequence).
// `count` positive integers joined by 'x'; the one at `zero_at` (-1: none) may be 0.
bool is_shape(std::string_view dims, int count, int zero_at) {
  for (int i = 0; i < count; ++i) {
    const size_t end = i + 1 < count ? dims.find('x') : dims.size();
    if (end == std::string_view::npos) return false;
    const std::string_view digits = dims.substr(0, end);
    int64_t value = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size()) return false;
    if (value < 0 || (value == 0 && i != zero_at)) return false;
    dims.remove_prefix(i + 1 < count ? end + 1 : end);
  }
  return dims.empty();
}

// A measured-op key of the form op_costs.h writes: "gemm MxNxK", "attn_fwd BxTxHxKVxHDxW",
// "attn_bwd ..." or "layer_fwd BxT", "layer_bwd BxT". A key of any other form would never be
// looked up, so its measurement would be dropped without a word.
bool is_measured_op_key(std::string_view key) {
  const size_t space = key.find(' ');
  if (space == std::string_view::npos) return false;
  const std::string_view op = key.substr(0, space), dims = key.substr(space + 1);
  if (op == "gemm") return is_shape(dims, 3, -1);
  if (op == "attn_fwd" || op == "attn_bwd") return is_shape(dims, 6, 5);
  if (op == "cp_attn_fwd" || op == "cp_attn_bwd") return is_shape(dims, 7, 5);
  if (op == "layer_fwd" || op == "layer_bwd") return is_shape(dims, 2, -1);
  return false;
}

// One entry of measured_ops or measured_ops_concurrent: a key of the documented form and a
// finite, positive number of seconds (docs/plan.md: every value is checked).
Status read_measured_op(const MapReader& r, const std::string& table_key,
                        const std::pair<YAML::Node, YAML::Node>& entry, MeasuredOps& table) {
  std::string op;
  try {
    op = entry.first.as<std::string>();
  } catch (const YAML::Exception&) {
    return r.error(table_key, "must map op shapes to seconds (a key is not a string)");
  }
  const std::string where = table_key + "." + op;
  if (!is_measured_op_key(op)) {
    return r.error(where,
                   "is not an op shape: gemm MxNxK, attn_fwd BxTxHxKVxHDxW, attn_bwd "
                   "BxTxHxKVxHDxW, cp_attn_fwd or cp_attn_bwd BxTxHxKVxHDxWxCP, layer_fwd BxT "
                   "or layer_bwd BxT (positive integers; W may be 0)");
  }
  double seconds = 0;
  try {
    seconds = entry.second.as<double>();
  } catch (const YAML::Exception&) {
    return r.error(where, "must be seconds (a number)");
  }
  if (!std::isfinite(seconds) || !(seconds > 0)) {
    return r.error(where, "must be a positive, finite number of seconds (got " +
                              MapReader::format(seconds) + ")");
  }
  table[op] = seconds;
  return Status::OK();
}

Status read_device(MapReader& top, Device& d, const std::string& file) {
  if (!top.has("device")) return top.error("device", "is required (the device profile)");
  MapReader r(top.child("device"), "device", file);
  MS_RETURN_IF_ERROR(r.check_is_map());
  MS_RETURN_IF_ERROR(r.refuse_keys_other_than(
      {"name", "dtype", "peak_tflops", "memory_bandwidth_gbs", "attention_efficiency",
       "adamw_ns_per_element", "swiglu_forward_ns_per_element", "swiglu_backward_ns_per_element",
       "gemm_efficiency", "gemm_points", "measured_ops", "measured_ops_concurrent", "source"}));
  MS_ASSIGN_OR_RETURN(d.name, r.text("name", false, "device"));
  MS_ASSIGN_OR_RETURN(d.dtype, r.text("dtype", false, "f32"));
  if (d.dtype != "f32" && d.dtype != "bf16" && d.dtype != "fp8") {
    return r.error("device.dtype", "must be f32, bf16 or fp8 (got " + d.dtype + ")");
  }
  MapReader peaks(r.child("peak_tflops"), "device.peak_tflops", file);
  if (!r.has("peak_tflops")) return r.error("device.peak_tflops", "is required (TFLOP/s by dtype)");
  MS_RETURN_IF_ERROR(peaks.check_is_map());
  for (const char* dtype : {"f32", "tf32", "bf16", "f16", "fp8"}) {
    if (!peaks.has(dtype)) continue;
    MS_ASSIGN_OR_RETURN(d.peak_tflops[dtype], peaks.number(dtype, true, 0, 1e-9));
  }
  MS_RETURN_IF_ERROR(peaks.refuse_unknown());
  if (!d.peak_tflops.count(d.dtype)) {
    return r.error("device.peak_tflops." + d.dtype, "is required: device.dtype is " + d.dtype);
  }
  MS_ASSIGN_OR_RETURN(d.memory_bandwidth_gbs, r.number("memory_bandwidth_gbs", true, 0, 1e-6));
  MS_ASSIGN_OR_RETURN(d.attention_efficiency, r.number("attention_efficiency", false, 0.5, 1e-6));
  MS_ASSIGN_OR_RETURN(d.adamw_ns_per_element, r.number("adamw_ns_per_element", false, 0, 0));
  MS_ASSIGN_OR_RETURN(d.swiglu_forward_ns_per_element,
                      r.number("swiglu_forward_ns_per_element", false, 0, 0));
  MS_ASSIGN_OR_RETURN(d.swiglu_backward_ns_per_element,
                      r.number("swiglu_backward_ns_per_element", false, 0, 0));
  MS_RETURN_IF_ERROR(read_gemm(r, d.gemm, file));
  for (const auto& [key, table] : {std::pair<const char*, MeasuredOps*>{"measured_ops", &d.measured},
                                   {"measured_ops_concurrent", &d.measured_concurrent}}) {
    const YAML::Node ops = r.child(key);
    if (!ops) continue;
    if (!ops.IsMap()) return r.error(r.key(key), "must map op shapes to seconds");
    for (const auto& entry : ops) {
      MS_RETURN_IF_ERROR(read_measured_op(r, r.key(key), entry, *table));
    }
  }
  r.has("source");
  return r.refuse_unknown();
}

Status read_profile_quality(MapReader& top, ProfileQuality& q, const std::string& file) {
  if (!top.has("profile")) return Status::OK();
  MapReader r(top.child("profile"), "profile", file);
  MS_RETURN_IF_ERROR(r.check_is_map());
  MS_RETURN_IF_ERROR(r.refuse_keys_other_than({"spread", "load_share", "repeated"}));
  MS_ASSIGN_OR_RETURN(q.spread, r.number("spread", false, 0, 0));
  MS_ASSIGN_OR_RETURN(q.load_share, r.number("load_share", false, 0, 0));
  if (q.load_share > 1) {
    return r.error(r.key("load_share"), "must be at most 1 (a share of the node's CPU time)");
  }
  MS_ASSIGN_OR_RETURN(q.repeated, r.integer("repeated", false, 0, 0));
  return r.refuse_unknown();
}

Status read_overlap(MapReader& top, Cluster& c, const std::string& file) {
  if (!top.has("overlap")) return Status::OK();
  MapReader r(top.child("overlap"), "overlap", file);
  MS_RETURN_IF_ERROR(r.check_is_map());
  MS_RETURN_IF_ERROR(r.refuse_keys_other_than({"dp_s_per_mib", "dp_s_per_mib_oversubscribed"}));
  for (const auto& [key, value] :
       {std::pair<const char*, std::optional<DpReductionCost>*>{"dp_s_per_mib", &c.dp_cost},
        {"dp_s_per_mib_oversubscribed", &c.dp_cost_oversubscribed}}) {
    if (!r.has(key)) continue;
    MapReader m(r.child(key), std::string("overlap.") + key, file);
    MS_RETURN_IF_ERROR(m.check_is_map());
    DpReductionCost cost;
    MS_ASSIGN_OR_RETURN(cost.reduce_scatter_s_per_mib, m.number("reduce_scatter", true, 0, 0));
    MS_ASSIGN_OR_RETURN(cost.allreduce_s_per_mib, m.number("allreduce", true, 0, 0));
    MS_ASSIGN_OR_RETURN(cost.ranks, m.integer("ranks", true, 0, 2));
    MS_RETURN_IF_ERROR(m.refuse_unknown());
    *value = cost;
  }
  return r.refuse_unknown();
}

}  // namespace

double Cluster::peak_flops() const { return device.peak_tflops.at(device.dtype) * 1e12; }

Result<Cluster> cluster_from_yaml_text(std::string_view text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ":" + std::to_string(e.mark.line + 1) + ": not YAML: " + e.msg);
  }
  Cluster c;
  c.source = source;
  MapReader top(root, "", source);
  if (!root.IsMap()) return top.error("(top level)", "must be a mapping of cluster keys");
  MS_RETURN_IF_ERROR(top.refuse_keys_other_than(
      {"name", "ranks", "ranks_per_node", "devices_per_node", "concurrency_efficiency",
       "memory_per_rank_gib", "runtime_overhead_mib", "overlap_dp", "step_overhead_ms", "device",
       "links", "profile", "overlap", "source"}));
  MS_ASSIGN_OR_RETURN(c.name, top.text("name", false, "cluster"));
  MS_ASSIGN_OR_RETURN(c.ranks, top.integer("ranks", true, 0, 1));
  MS_ASSIGN_OR_RETURN(c.ranks_per_node, top.integer("ranks_per_node", true, 0, 1));
  MS_ASSIGN_OR_RETURN(c.devices_per_node,
                      top.integer("devices_per_node", false, c.ranks_per_node, 1));
  MS_ASSIGN_OR_RETURN(c.concurrency_efficiency,
                      top.number("concurrency_efficiency", false, 1, 1e-3));
  if (c.concurrency_efficiency > 1) {
    return top.error("concurrency_efficiency",
                     "must be at most 1 (a fraction of one rank's speed alone)");
  }
  MS_ASSIGN_OR_RETURN(c.memory_per_rank_gib, top.number("memory_per_rank_gib", true, 0, 1e-6));
  MS_ASSIGN_OR_RETURN(c.runtime_overhead_mib, top.number("runtime_overhead_mib", false, 0, 0));
  MS_ASSIGN_OR_RETURN(c.overlap_dp, top.boolean("overlap_dp", false));
  MS_ASSIGN_OR_RETURN(c.step_overhead_ms, top.number("step_overhead_ms", false, 0, 0));
  MS_RETURN_IF_ERROR(read_device(top, c.device, source));
  if (!top.has("links")) return top.error("links", "is required (intra_node, inter_node)");
  MapReader links(top.child("links"), "links", source);
  MS_RETURN_IF_ERROR(links.check_is_map());
  MS_RETURN_IF_ERROR(links.refuse_keys_other_than({"intra_node", "inter_node", "oversubscribed"}));
  MS_ASSIGN_OR_RETURN(c.intra_node, read_link(links, "intra_node", source));
  if (links.has("inter_node")) {
    MS_ASSIGN_OR_RETURN(c.inter_node, read_link(links, "inter_node", source));
  } else if (c.ranks > c.ranks_per_node) {
    return links.error("links.inter_node", "is required: ranks (" + std::to_string(c.ranks) +
                                               ") span more than one node of " +
                                               std::to_string(c.ranks_per_node));
  } else {
    c.inter_node = c.intra_node;
  }
  if (links.has("oversubscribed")) {
    MS_ASSIGN_OR_RETURN(c.oversubscribed, read_link(links, "oversubscribed", source));
  }
  MS_RETURN_IF_ERROR(links.refuse_unknown());
  MS_RETURN_IF_ERROR(read_profile_quality(top, c.profile, source));
  MS_RETURN_IF_ERROR(read_overlap(top, c, source));
  top.has("source");
  MS_RETURN_IF_ERROR(top.refuse_unknown());
  return c;
}

Result<Cluster> load_cluster(const std::string& path) {
  Result<std::string> text = io::read_file(path, io::kMaxConfigFileBytes, "cluster file");
  if (text.status().code() == StatusCode::kNotFound) {
    return NotFound("no cluster file at " + path + " (see configs/clusters/)");
  }
  MS_RETURN_IF_ERROR(text.status());
  return cluster_from_yaml_text(*text, path);
}

std::string cluster_to_yaml(const Cluster& c) {
  YAML::Emitter out;
  out.SetDoublePrecision(6);
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.name;
  out << YAML::Key << "ranks" << YAML::Value << c.ranks;
  out << YAML::Key << "ranks_per_node" << YAML::Value << c.ranks_per_node;
  out << YAML::Key << "devices_per_node" << YAML::Value << c.devices_per_node;
  out << YAML::Key << "concurrency_efficiency" << YAML::Value << c.concurrency_efficiency;
  out << YAML::Key << "memory_per_rank_gib" << YAML::Value << c.memory_per_rank_gib;
  out << YAML::Key << "runtime_overhead_mib" << YAML::Value << c.runtime_overhead_mib;
  out << YAML::Key << "overlap_dp" << YAML::Value << c.overlap_dp;
  out << YAML::Key << "step_overhead_ms" << YAML::Value << c.step_overhead_ms;
  out << YAML::Key << "device" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << c.device.name;
  out << YAML::Key << "dtype" << YAML::Value << c.device.dtype;
  out << YAML::Key << "peak_tflops" << YAML::Value << YAML::Flow << YAML::BeginMap;
  for (const auto& [dtype, v] : c.device.peak_tflops) out << YAML::Key << dtype << YAML::Value << v;
  out << YAML::EndMap;
  out << YAML::Key << "memory_bandwidth_gbs" << YAML::Value << c.device.memory_bandwidth_gbs;
  out << YAML::Key << "attention_efficiency" << YAML::Value << c.device.attention_efficiency;
  for (const auto& [key, v] :
       {std::pair<const char*, double>{"adamw_ns_per_element", c.device.adamw_ns_per_element},
        {"swiglu_forward_ns_per_element", c.device.swiglu_forward_ns_per_element},
        {"swiglu_backward_ns_per_element", c.device.swiglu_backward_ns_per_element}}) {
    if (v > 0) out << YAML::Key << key << YAML::Value << v;
  }
  out << YAML::Key << "gemm_efficiency" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
      << "max" << YAML::Value << c.device.gemm.max << YAML::Key << "half_gflop" << YAML::Value
      << c.device.gemm.half_gflop << YAML::EndMap;
  if (!c.device.gemm.points.empty()) {
    out << YAML::Key << "gemm_points" << YAML::Value << YAML::BeginSeq;
    for (const auto& [f, rate] : c.device.gemm.points) {
      out << YAML::Flow << YAML::BeginSeq << f << rate << YAML::EndSeq;
    }
    out << YAML::EndSeq;
  }
  for (const auto& [key, table] :
       {std::pair<const char*, const MeasuredOps*>{"measured_ops", &c.device.measured},
        {"measured_ops_concurrent", &c.device.measured_concurrent}}) {
    if (table->empty()) continue;
    out << YAML::Key << key << YAML::Value << YAML::BeginMap;
    for (const auto& [op, s] : *table) out << YAML::Key << op << YAML::Value << s;
    out << YAML::EndMap;
  }
  out << YAML::EndMap;
  out << YAML::Key << "links" << YAML::Value << YAML::BeginMap;
  for (const auto& [name, link] :
       {std::pair<const char*, Link>{"intra_node", c.intra_node}, {"inter_node", c.inter_node},
        {"oversubscribed", c.oversubscribed}}) {
    if (link.bandwidth_gbs <= 0) continue;  // oversubscribed: not measured
    out << YAML::Key << name << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
        << "bandwidth_gbs" << YAML::Value << link.bandwidth_gbs << YAML::Key << "latency_us"
        << YAML::Value << link.latency_us << YAML::EndMap;
  }
  out << YAML::EndMap;
  if (c.dp_cost || c.dp_cost_oversubscribed) {
    out << YAML::Key << "overlap" << YAML::Value << YAML::Flow << YAML::BeginMap;
    for (const auto& [key, cost] :
         {std::pair<const char*, const std::optional<DpReductionCost>*>{"dp_s_per_mib", &c.dp_cost},
          {"dp_s_per_mib_oversubscribed", &c.dp_cost_oversubscribed}}) {
      if (!*cost) continue;
      out << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
          << "reduce_scatter" << YAML::Value << (*cost)->reduce_scatter_s_per_mib << YAML::Key
          << "allreduce" << YAML::Value << (*cost)->allreduce_s_per_mib << YAML::Key << "ranks"
          << YAML::Value << (*cost)->ranks << YAML::EndMap;
    }
    out << YAML::EndMap;
  }
  if (c.profile.spread > 0 || c.profile.load_share > 0 || c.profile.repeated > 0) {
    out << YAML::Key << "profile" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key
        << "spread" << YAML::Value << c.profile.spread << YAML::Key << "load_share"
        << YAML::Value << c.profile.load_share << YAML::Key << "repeated" << YAML::Value
        << c.profile.repeated << YAML::EndMap;
  }
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

Status apply_diagnose_check(const std::string& path, Cluster& cluster) {
  Result<std::string> text = io::read_file(path, io::kMaxConfigFileBytes, "check JSON");
  if (text.status().code() == StatusCode::kNotFound) {
    return NotFound("no ms-diagnose check JSON at " + path);
  }
  MS_RETURN_IF_ERROR(text.status());
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(*text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(path + ": not JSON (" + e.what() +
                           "); pass `ms-diagnose check --json` output");
  }
  if (!doc.contains("collectives") || !doc["collectives"].is_array() || !doc.contains("ranks")) {
    return InvalidArgument(
        path + ": no \"collectives\" and \"ranks\": not `ms-diagnose check --json` output");
  }
  std::set<std::string> hosts;
  for (const auto& r : doc["ranks"]) hosts.insert(r.value("host", ""));
  for (const auto& c : doc["collectives"]) {
    if (c.value("collective", "") != "all_reduce") continue;
    double small_time = -1, big_bw = 0;
    int64_t small = INT64_MAX, big = 0;
    for (const auto& row : c["rows"]) {
      const auto& p = row["out_of_place"];
      if (p.is_null()) continue;
      const int64_t size = row.value("size", int64_t{0});
      if (size < small) small = size, small_time = p.value("time_us", -1.0);
      if (size > big) big = size, big_bw = p.value("busbw_gbs", 0.0);
    }
    if (big_bw <= 0 || small_time < 0) break;
    const int n = static_cast<int>(doc["ranks"].size());
    Link link{big_bw, small_time / std::max(1, 2 * (n - 1))};
    (hosts.size() > 1 ? cluster.inter_node : cluster.intra_node) = link;
    return Status::OK();
  }
  return InvalidArgument(path +
                         ": no all_reduce rows with measured times (run `ms-diagnose check "
                         "--json` with the all_reduce collective)");
}

}  // namespace ms::plan
