// Shared helpers of the tokenizer tests: paths into the source tree and the GPT-2 tokenizer
// committed under data/tokenizers/gpt2/, loaded once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "data/unicode_utf8.h"
#include "io/atomic_file.h"
#include "tests/io/temp_dir.h"

namespace ms::data {

using io::testing::TempDir;

// `relative` under the source root (ctest sets MS_SOURCE_DIR; falls back to the working dir).
inline std::string source_path(const std::string& relative) {
  const char* root = std::getenv("MS_SOURCE_DIR");
  return std::string(root ? root : ".") + "/" + relative;
}

inline const Tokenizer& gpt2() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(source_path("data/tokenizers/gpt2/tokenizer.json"));
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? std::move(t).value() : nullptr;
  }();
  if (!tokenizer) std::abort();
  return *tokenizer;
}

// Writes `contents` to `dir`/`name` and returns the path.
inline std::string write_test_file(const TempDir& dir, const std::string& name, const std::string& contents) {
  const std::string path = dir.file(name);
  EXPECT_TRUE(io::write_file_atomic(path, contents).ok());
  return path;
}

// A minimal valid byte-level tokenizer.json with `model` replaced by the caller's text.
inline std::string tokenizer_json_with_model(const std::string& model) {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
  "model": )" + model + "}";
}

// The error of loading a tokenizer.json of `contents`, OK when it loads.
inline Status load_error(const std::string& contents) {
  TempDir dir;
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(write_test_file(dir, "tokenizer.json", contents));
  return t.ok() ? Status::OK() : t.status();
}

// A byte-level vocabulary of all 256 bytes (ids 0..255) plus `extra` entries, as JSON.
inline std::string byte_vocab_json(const std::string& extra) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    vocab += (b ? "," : "") + nlohmann::json(bytes_to_byte_level(std::string(1, static_cast<char>(b)))).dump() +
             ":" + std::to_string(b);
  }
  return vocab + extra + "}";
}

}  // namespace ms::data
