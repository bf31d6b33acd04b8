// Manifest JSON reading, validation and writing; resolution of "a checkpoint" paths.
#include "ckpt/manifest.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>

#include "ckpt/regions.h"
#include "core/checked_math.h"
#include "core/rank_file.h"
#include "core/tensor.h"
#include "io/atomic_file.h"

namespace ms::ckpt {
namespace {

using nlohmann::json;

Status bad(const std::string& where, const std::string& what) {
  return Corruption(where + ": " + what);
}

// Reads a required key of `object`, converting to T; Corruption naming the key otherwise.
template <typename T>
Status get(const json& object, const char* key, T& out, const std::string& where) {
  if (!object.is_object() || !object.contains(key)) return bad(where, std::string("missing key \"") + key + "\"");
  try {
    out = object.at(key).get<T>();
  } catch (const json::exception& e) {
    return bad(where, std::string("key \"") + key + "\" has the wrong type: " + e.what());
  }
  return Status::OK();
}

Result<ShardRecord> parse_shard(const json& j, const std::string& where) {
  ShardRecord s;
  MS_RETURN_IF_ERROR(get(j, "file", s.file, where));
  MS_RETURN_IF_ERROR(get(j, "offset", s.offset, where));
  MS_RETURN_IF_ERROR(get(j, "length", s.length, where));
  MS_RETURN_IF_ERROR(get(j, "global_offsets", s.global_offsets, where));
  MS_RETURN_IF_ERROR(get(j, "lengths", s.lengths, where));
  MS_RETURN_IF_ERROR(get(j, "codec", s.codec, where));
  MS_RETURN_IF_ERROR(get(j, "crc32c", s.crc32c, where));
  return s;
}

Result<TensorRecord> parse_tensor(const json& j, const std::string& where) {
  TensorRecord t;
  MS_RETURN_IF_ERROR(get(j, "name", t.name, where));
  const std::string here = where + " tensor \"" + t.name + "\"";
  std::string dtype;
  MS_RETURN_IF_ERROR(get(j, "dtype", dtype, here));
  Result<DType> parsed = parse_dtype(dtype);
  if (!parsed.ok()) return bad(here, "unknown dtype \"" + dtype + "\"");
  t.dtype = *parsed;
  MS_RETURN_IF_ERROR(get(j, "global_shape", t.global_shape, here));
  json shards;
  MS_RETURN_IF_ERROR(get(j, "shards", shards, here));
  if (!shards.is_array()) return bad(here, "\"shards\" is not an array");
  for (size_t i = 0; i < shards.size(); ++i) {
    MS_ASSIGN_OR_RETURN(ShardRecord s, parse_shard(shards[i], here + " shard " + std::to_string(i)));
    t.shards.push_back(std::move(s));
  }
  return t;
}

// The recorded layout is what readers report and what a resume compares against, so it must be
// one the trainer can have saved: every size at least 1, zero 0 or 1, and the world (pp x dp x
// cp x tp trainer ranks; cp is not recorded) a multiple of pp x dp x tp whose dp x cp part ep
// divides. Products are checked: a crafted size must not wrap into a plausible one.
Status check_layout(const Layout& l, const std::string& here) {
  for (const auto& [key, value] : {std::pair<const char*, int>{"world", l.world},
                                   {"dp", l.dp},
                                   {"tp", l.tp},
                                   {"pp", l.pp},
                                   {"ep", l.ep}}) {
    if (value < 1) {
      return bad(here, std::string("\"") + key + "\" is " + std::to_string(value) +
                           "; a layout size must be at least 1");
    }
  }
  if (l.zero != 0 && l.zero != 1) {
    return bad(here, "\"zero\" is " + std::to_string(l.zero) + "; it must be 0 or 1");
  }
  const Result<int64_t> pp_dp = checked_mul(l.pp, l.dp, "pp * dp");
  const Result<int64_t> pp_dp_tp = pp_dp.ok() ? checked_mul(*pp_dp, l.tp, "pp * dp * tp") : pp_dp;
  if (!pp_dp_tp.ok() || l.world % *pp_dp_tp != 0) {
    return bad(here, "\"world\" " + std::to_string(l.world) +
                         " is not a multiple of pp * dp * tp (" + std::to_string(l.pp) + " * " +
                         std::to_string(l.dp) + " * " + std::to_string(l.tp) + ")");
  }
  const int64_t dp_cp = l.world / (int64_t{l.pp} * l.tp);
  if (dp_cp % l.ep != 0) {
    return bad(here, "\"ep\" " + std::to_string(l.ep) + " does not divide the " +
                         std::to_string(dp_cp) + " data-parallel x context-parallel ranks");
  }
  return Status::OK();
}

Status parse_layout(const json& j, Layout& l, const std::string& where) {
  const std::string here = where + " layout";
  MS_RETURN_IF_ERROR(get(j, "world", l.world, here));
  MS_RETURN_IF_ERROR(get(j, "dp", l.dp, here));
  MS_RETURN_IF_ERROR(get(j, "tp", l.tp, here));
  MS_RETURN_IF_ERROR(get(j, "pp", l.pp, here));
  MS_RETURN_IF_ERROR(get(j, "ep", l.ep, here));
  MS_RETURN_IF_ERROR(get(j, "zero", l.zero, here));
  return check_layout(l, here);
}

// A zstd frame regenerates at most 128 KiB per 4-byte RLE block, so no shard of `length` stored
// bytes can hold more than this many times as much; a box claiming more is corrupt (and would
// make a reader allocate what no file backs).
constexpr uint64_t kMaxZstdExpansion = 32768;

// The shard's name in errors: its box, file and byte offset.
std::string shard_name(const ShardRecord& s) {
  return "shard " + box_string({s.global_offsets, s.lengths}) + " (" + s.file + " offset " +
         std::to_string(s.offset) + ")";
}

// The box lies inside the tensor: every offset >= 0, every length >= 1, every end (computed
// without overflow) within the global shape.
Status check_box(const TensorRecord& t, const ShardRecord& s) {
  if (s.global_offsets.size() != t.global_shape.size() || s.lengths.size() != t.global_shape.size()) {
    return InvalidArgument("offsets/lengths rank differs from the global shape's");
  }
  for (size_t d = 0; d < s.lengths.size(); ++d) {
    const Result<int64_t> end = checked_add(s.global_offsets[d], s.lengths[d], "box end");
    if (s.lengths[d] < 1 || !end.ok() || *end > t.global_shape[d]) {
      return InvalidArgument("box lies outside the tensor of shape " +
                             shape_string(t.global_shape) + " in dimension " + std::to_string(d));
    }
  }
  return Status::OK();
}

// The stored byte range and codec agree with the box.
Status check_stored_bytes(const TensorRecord& t, const ShardRecord& s) {
  if (s.codec != "raw" && s.codec != "zstd") return InvalidArgument("unknown codec \"" + s.codec + "\"");
  MS_ASSIGN_OR_RETURN(const uint64_t raw, checked_nbytes(s.lengths, dtype_size(t.dtype), "box"));
  MS_ASSIGN_OR_RETURN(const uint64_t end, checked_end(s.offset, s.length, "byte range"));
  if (end > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return InvalidArgument("byte range ends at " + std::to_string(end) + ", past any file");
  }
  if (s.codec == "raw" && s.length != raw) {
    return InvalidArgument("length " + std::to_string(s.length) + " != " + std::to_string(raw) +
                           " bytes of its box");
  }
  if (s.codec == "zstd" && (s.length == 0 || raw / kMaxZstdExpansion > s.length)) {
    return InvalidArgument("a zstd frame of " + std::to_string(s.length) + " bytes cannot hold the " +
                           std::to_string(raw) + " bytes of its box");
  }
  if (s.file.empty() || s.file.find('/') != std::string::npos || s.file.starts_with(".")) {
    return InvalidArgument("file name \"" + s.file + "\" is not a plain name in the step directory");
  }
  return Status::OK();
}

Status validate_shard(const TensorRecord& t, const ShardRecord& s, const std::string& where) {
  Status st = check_box(t, s);
  if (st.ok()) st = check_stored_bytes(t, s);
  if (st.ok()) return st;
  return bad(where + " tensor \"" + t.name + "\" " + shard_name(s), st.message());
}

// The shards tile the tensor exactly: disjoint and covering (regions.h).
Status check_tiling(const TensorRecord& t, const std::string& where) {
  std::vector<Box> boxes;
  boxes.reserve(t.shards.size());
  for (const ShardRecord& s : t.shards) boxes.push_back({s.global_offsets, s.lengths});
  const std::optional<TilingProblem> p = find_tiling_problem(t.global_shape, boxes);
  if (!p) return Status::OK();
  const std::string here = where + " tensor \"" + t.name + "\" of shape " + shape_string(t.global_shape);
  if (p->overlap) {
    return bad(here, "shards overlap: " + shard_name(t.shards[p->first]) + " and " +
                         shard_name(t.shards[p->second]) + " share elements; a checkpoint must "
                         "store each element exactly once");
  }
  std::string neighbours;
  if (p->first != TilingProblem::kNone) neighbours += " after " + shard_name(t.shards[p->first]);
  if (p->second != TilingProblem::kNone) {
    neighbours += (neighbours.empty() ? " before " : " and before ") + shard_name(t.shards[p->second]);
  }
  return bad(here, "shards leave a gap: no shard holds the elements " + box_string(p->gap) +
                       neighbours + "; the checkpoint is incomplete");
}

Status validate_tensor(const TensorRecord& t, const std::string& where) {
  const Result<uint64_t> bytes = checked_nbytes(t.global_shape, dtype_size(t.dtype), "global_shape");
  if (!bytes.ok()) return bad(where + " tensor \"" + t.name + "\"", bytes.status().message());
  for (const ShardRecord& s : t.shards) MS_RETURN_IF_ERROR(validate_shard(t, s, where));
  return check_tiling(t, where);
}

}  // namespace

// Both are only called on validated records, whose sizes checked_nbytes has accepted.
int64_t TensorRecord::numel() const { return shape_numel(global_shape); }
uint64_t TensorRecord::bytes() const { return static_cast<uint64_t>(numel()) * dtype_size(dtype); }

Status Manifest::validate(const std::string& where) const {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorRecord& t = tensors[i];
    if (i > 0 && tensors[i - 1].name >= t.name) {
      return bad(where, "tensors are not sorted by unique name at \"" + t.name + "\"");
    }
    MS_RETURN_IF_ERROR(validate_tensor(t, where));
  }
  return Status::OK();
}

Result<Manifest> Manifest::parse(std::string_view text, const std::string& where) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad(where, "not a JSON object");
  Manifest m;
  MS_RETURN_IF_ERROR(get(j, "format_version", m.format_version, where));
  if (m.format_version > kFormatVersion || m.format_version < 1) {
    return FailedPrecondition(where + ": format_version " + std::to_string(m.format_version) +
                              " is not supported by this build (reads 1.." +
                              std::to_string(kFormatVersion) + "); use a newer toolkit");
  }
  MS_RETURN_IF_ERROR(get(j, "step", m.step, where));
  MS_RETURN_IF_ERROR(get(j, "toolkit_version", m.toolkit_version, where));
  MS_RETURN_IF_ERROR(get(j, "git_revision", m.git_revision, where));
  MS_RETURN_IF_ERROR(get(j, "config_yaml", m.config_yaml, where));
  json layout, tensors;
  MS_RETURN_IF_ERROR(get(j, "layout", layout, where));
  MS_RETURN_IF_ERROR(parse_layout(layout, m.layout, where));
  MS_RETURN_IF_ERROR(get(j, "state", m.state, where));
  MS_RETURN_IF_ERROR(get(j, "tensors", tensors, where));
  if (!tensors.is_array()) return bad(where, "\"tensors\" is not an array");
  for (size_t i = 0; i < tensors.size(); ++i) {
    MS_ASSIGN_OR_RETURN(TensorRecord t, parse_tensor(tensors[i], where + " tensors[" + std::to_string(i) + "]"));
    m.tensors.push_back(std::move(t));
  }
  MS_RETURN_IF_ERROR(m.validate(where));
  return m;
}

Result<Manifest> Manifest::read(const std::string& step_dir, io::Env& env) {
  const std::string path = step_dir + "/manifest.json";
  Result<std::string> text = io::read_file(env, path, io::kMaxManifestFileBytes, "manifest");
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound(path + " does not exist: " + step_dir + " is not a complete checkpoint");
    }
    return text.status();
  }
  return parse(*text, path);
}

Result<Manifest> Manifest::read(const std::string& step_dir) {
  return read(step_dir, io::default_env());
}

const TensorRecord* Manifest::find(std::string_view name) const {
  auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                             [](const TensorRecord& t, std::string_view n) { return t.name < n; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

void Manifest::sort_tensors() {
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorRecord& a, const TensorRecord& b) { return a.name < b.name; });
}

json Manifest::to_json() const {
  json tensor_list = json::array();
  for (const TensorRecord& t : tensors) {
    json shards = json::array();
    for (const ShardRecord& s : t.shards) {
      shards.push_back({{"file", s.file}, {"offset", s.offset}, {"length", s.length},
                        {"global_offsets", s.global_offsets}, {"lengths", s.lengths},
                        {"codec", s.codec}, {"crc32c", s.crc32c}});
    }
    tensor_list.push_back({{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))},
                           {"global_shape", t.global_shape}, {"shards", std::move(shards)}});
  }
  return {{"format_version", format_version},
          {"step", step},
          {"toolkit_version", toolkit_version},
          {"git_revision", git_revision},
          {"layout", {{"world", layout.world}, {"dp", layout.dp}, {"tp", layout.tp},
                      {"pp", layout.pp}, {"ep", layout.ep}, {"zero", layout.zero}}},
          {"state", state},
          {"config_yaml", config_yaml},
          {"tensors", std::move(tensor_list)}};
}

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%08lld", static_cast<long long>(step));
  return name;
}

std::string data_file_name(int rank) { return rank_file_name(rank, ".data"); }

int64_t parse_step_dir_name(std::string_view name) {
  if (!name.starts_with("step-") || name.size() <= 5 || name.size() > 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string latest_file_text(std::string_view step_name) { return std::string(step_name) + "\n"; }

Result<std::string> parse_latest(std::string_view text, const std::string& latest_path) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r')) {
    text.remove_suffix(1);
  }
  if (parse_step_dir_name(text) < 0) {
    const std::string shown(text.substr(0, 64));
    return Corruption(latest_path + ": expected the name of a step directory (step-XXXXXXXX), "
                      "found \"" + shown + (text.size() > 64 ? "...": "") + "\"");
  }
  return std::string(text);
}

Result<std::string> read_latest(const std::string& latest_path, io::Env& env) {
  // One short line; a larger file is refused before it is read into memory.
  constexpr uint64_t kMaxLatestBytes = 4096;
  if (env.exists(latest_path) && !env.is_directory(latest_path)) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<io::File> file, env.open(latest_path, io::OpenMode::kRead));
    MS_ASSIGN_OR_RETURN(const uint64_t size, file->size());
    if (size > kMaxLatestBytes) {
      return Corruption(latest_path + ": " + std::to_string(size) +
                        " bytes, not the one line naming a step directory");
    }
  }
  Result<std::string> text = io::read_file(env, latest_path, kMaxLatestBytes, "latest file");
  if (!text.ok()) return text.status();
  return parse_latest(*text, latest_path);
}

namespace {

// The step directory the `latest` file at `latest_path` names (a name relative to its folder).
Result<std::string> follow_latest(const std::string& latest_path, io::Env& env) {
  MS_ASSIGN_OR_RETURN(const std::string name, read_latest(latest_path, env));
  const std::string dir = io::parent_dir(latest_path) + "/" + name;
  if (!env.exists(dir + "/manifest.json")) {
    return NotFound(latest_path + " names " + name + ", which is not a complete checkpoint (" +
                    dir + "/manifest.json is missing)");
  }
  return dir;
}

}  // namespace

Result<std::string> resolve_checkpoint(const std::string& path, io::Env& env) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  if (!env.exists(p)) return NotFound("checkpoint " + p + " does not exist");
  if (!env.is_directory(p)) return follow_latest(p, env);
  if (env.exists(p + "/manifest.json")) return p;
  if (env.exists(p + "/latest")) return follow_latest(p + "/latest", env);
  return NotFound(p + " is neither a step directory (no manifest.json) nor a checkpoints "
                      "directory (no latest file)");
}

Result<std::string> resolve_checkpoint(const std::string& path) {
  return resolve_checkpoint(path, io::default_env());
}

}  // namespace ms::ckpt
