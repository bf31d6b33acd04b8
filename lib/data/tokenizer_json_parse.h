// Parsing a Hugging Face tokenizer.json for loading. The two large parts, model.vocab (about
// 50k-200k entries) and model.merges, are streamed into flat lists during the parse instead of
// being built as a JSON tree: building, walking and freeing that tree of small maps was most of
// the time `ms-data tokenizer encode` spent before reading its input. Everything else is kept as
// a tree for tokenizer_json.cc's readers. Internal to lib/data.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::data {

// A string of ParsedTokenizerJson::strings.
struct StringRef {
  size_t offset = 0;
  size_t size = 0;
};

// One model.vocab entry as written: the key, and its value when that is an integer.
struct RawVocabEntry {
  StringRef token;
  std::optional<int64_t> id;  // nullopt: the value is not an integer (or is one beyond int64)
};

// One model.merges entry as written: "left right" (kString, whole in `first`), ["left", "right"]
// (kPair), or anything else (kOther, refused by the reader with the entry's index).
struct RawMerge {
  enum class Form : uint8_t { kString, kPair, kOther };
  Form form = Form::kOther;
  StringRef first;
  StringRef second;
};

struct ParsedTokenizerJson {
  // The document, with model.vocab left an empty object when it was streamed into `vocab` and
  // model.merges an empty array when streamed into `merges`. Other values, including a vocab
  // that is not an object or merges that are not an array, are in the tree as written.
  nlohmann::json root;
  std::optional<std::vector<RawVocabEntry>> vocab;  // in file order; a repeated key appears twice
  std::optional<std::vector<RawMerge>> merges;
  // The streamed entries' strings back to back: one buffer rather than one allocation each.
  std::string strings;

  std::string_view string_of(StringRef ref) const { return std::string_view(strings).substr(ref.offset, ref.size); }
};

// Parses `text`; a syntax error names the line and column. `path` is only used in messages.
Result<ParsedTokenizerJson> parse_tokenizer_json(const std::string& path, std::string_view text);

}  // namespace ms::data
