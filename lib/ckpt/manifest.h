// The checkpoint manifest (ByteCheckpoint-style): a checkpoint describes GLOBAL tensors, not the
// rank-local pieces that wrote them, so it loads into any parallel layout. manifest.json in a
// step directory holds the format version, the step, the toolkit version, the resolved run
// config, the layout it was saved with, every tensor (dtype, global shape, shards: a regular box
// of the global tensor stored as a byte range of one data file, with its codec and crc32c) and
// the non-tensor state that influences later steps. docs/formats/checkpoint.md is the reference.
//
// Reading validates everything a damaged or hand-edited manifest could get wrong (missing keys,
// shards outside the tensor, lengths that do not match the box, unknown codecs, a newer format)
// and names the file and the key.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// The format version this build writes; readers accept it and every older one.
inline constexpr int kFormatVersion = 1;

// One stored box of a global tensor: elements [global_offsets, global_offsets + lengths),
// row-major, stored as `length` bytes at `offset` of `file` (relative to the step directory).
struct ShardRecord {
  std::string file;
  uint64_t offset = 0;
  uint64_t length = 0;  // stored bytes (compressed when codec is "zstd")
  std::vector<int64_t> global_offsets;
  std::vector<int64_t> lengths;
  std::string codec = "raw";  // "raw" or "zstd"
  uint32_t crc32c = 0;        // of the stored bytes
  bool operator==(const ShardRecord&) const = default;
};

struct TensorRecord {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> global_shape;
  std::vector<ShardRecord> shards;  // disjoint boxes covering the tensor
  int64_t numel() const;
  uint64_t bytes() const;  // uncompressed size of the global tensor
  bool operator==(const TensorRecord&) const = default;
};

// The parallel layout a checkpoint was saved with (informational: loading reshards).
struct Layout {
  int world = 1, dp = 1, tp = 1, pp = 1, ep = 1, zero = 0;
  bool operator==(const Layout&) const = default;
};

struct Manifest {
  int format_version = kFormatVersion;
  int64_t step = 0;
  std::string toolkit_version, git_revision;
  std::string config_yaml;  // the resolved run config
  Layout layout;
  std::vector<TensorRecord> tensors;  // sorted by name
  // Non-tensor state: step, lr schedule position, optimizer updates, RNG, loader
  // {plan_hash, consumed_samples}, spike guard window. Free-form JSON owned by the trainer.
  nlohmann::json state = nlohmann::json::object();

  // Reads and validates `<step_dir>/manifest.json`. NotFound when missing; Corruption naming the
  // file and key for anything malformed; FailedPrecondition for a newer format version.
  static Result<Manifest> read(const std::string& step_dir, io::Env& env);
  static Result<Manifest> read(const std::string& step_dir);
  // Parses manifest JSON text; `where` names the source in errors.
  static Result<Manifest> parse(std::string_view text, const std::string& where);

  // nullptr when absent. Binary search: tensors must be sorted (read() and sort_tensors() do).
  const TensorRecord* find(std::string_view name) const;
  void sort_tensors();
  nlohmann::json to_json() const;
  // Checks shards lie inside their tensors, have consistent lengths and known codecs, and do
  // not overlap; Corruption naming `where` and the tensor otherwise.
  Status validate(const std::string& where) const;
};

// "step-00000100"
std::string step_dir_name(int64_t step);
// The step of a "step-" + digits name; -1 for anything else.
int64_t parse_step_dir_name(std::string_view name);

// The `latest` file of a checkpoints/ directory holds one line, the name of a step directory
// beside it. This pair is the only code that writes or reads that format: the text for
// `step_name` ("step-00000100\n"), and the step name in `text` read from `latest_path`
// (trailing newline or blanks ignored), Corruption naming the file and what it holds when
// that is not a step directory name.
std::string latest_file_text(std::string_view step_name);
Result<std::string> parse_latest(std::string_view text, const std::string& latest_path);
// Reads and parses `latest_path`; NotFound when it is missing.
Result<std::string> read_latest(const std::string& latest_path, io::Env& env);
// The data file a saving rank writes: "rank-00001.data".
std::string data_file_name(int rank);

// A step directory, a checkpoints/ directory (newest complete via its `latest` file) or the
// `latest` file itself -> the step directory. NotFound/Corruption naming what is wrong.
Result<std::string> resolve_checkpoint(const std::string& path, io::Env& env);
Result<std::string> resolve_checkpoint(const std::string& path);

}  // namespace ms::ckpt
