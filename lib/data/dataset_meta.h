// The `<prefix>.meta.json` sidecar of a token dataset: what built it (toolkit version, git
// revision), with which tokenizer (path, content hash, kind, vocabulary size, end-of-document
// id), from which sources (path, documents, bytes, tokens) and the totals. Megatron ignores the
// file, so datasets stay byte compatible; our tools use it to check that a dataset and a
// tokenizer belong together and to describe a dataset without scanning it. Layout in
// docs/formats/megatron-dataset.md. Readers accept this format version and older, refuse newer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace ms::data {

inline constexpr int kDatasetMetaFormatVersion = 1;

struct DatasetSource {
  std::string path;
  uint64_t documents = 0;
  uint64_t bytes = 0;          // bytes of the file as stored (compressed for .jsonl.zst)
  uint64_t tokens = 0;         // tokens written for its documents, end-of-document ids included
  uint64_t skipped_lines = 0;  // malformed JSON lines skipped under --skip-bad-lines
};

struct DatasetMeta {
  int format_version = kDatasetMetaFormatVersion;
  std::string toolkit_version;  // version_string() of the writer
  std::string git_revision;
  std::string tokenizer_path;
  std::string tokenizer_hash;
  std::string tokenizer_kind;
  int64_t vocab_size = 0;
  int64_t eos_id = -1;          // -1: the tokenizer has none
  bool append_eos = false;
  std::string dtype;            // "u16", "i32", ... (dtype_name of the .idx code)
  std::vector<DatasetSource> sources;
  uint64_t documents = 0;
  uint64_t sequences = 0;
  uint64_t tokens = 0;
};

// Pretty-printed JSON text of `meta` (keys in the documented order).
std::string dataset_meta_to_json(const DatasetMeta& meta);
// Parses meta JSON; `path` names the file in errors. Corruption for malformed JSON, a missing
// or mistyped key, or a format version newer than this build understands.
Result<DatasetMeta> parse_dataset_meta(std::string_view text, const std::string& path);
// Reads and parses `path`; NotFound when it does not exist.
Result<DatasetMeta> read_dataset_meta(io::Env& env, const std::string& path);

}  // namespace ms::data
