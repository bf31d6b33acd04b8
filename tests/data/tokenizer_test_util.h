// Shared helpers of the tokenizer tests: paths into the source tree and the GPT-2 tokenizer
// committed under data/tokenizers/gpt2/, loaded once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "data/tokenizer.h"
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

}  // namespace ms::data
