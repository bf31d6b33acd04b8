// Small token datasets and mixtures for the plan and loader tests. Every token encodes where it
// came from (tag * 1'000'000 + document * 1000 + position), so a test can tell from a sample's
// tokens which source, document and offset it was packed from.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "data/indexed_dataset.h"
#include "data/mixture.h"
#include "data/plan_builder.h"

namespace ms::data::testing {

inline int32_t token_of(int tag, int document, int position) {
  return tag * 1'000'000 + document * 1000 + position;
}
inline int tag_of(int32_t token) { return token / 1'000'000; }
inline int document_of(int32_t token) { return (token % 1'000'000) / 1000; }
inline int position_of(int32_t token) { return token % 1000; }

class PlanDir {
 public:
  PlanDir() {
    std::string pattern = ::testing::TempDir() + "ms_plan_XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    const char* made = ::mkdtemp(buffer.data());
    EXPECT_NE(made, nullptr);
    path_ = made ? made : pattern;
  }
  ~PlanDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  PlanDir(const PlanDir&) = delete;
  PlanDir& operator=(const PlanDir&) = delete;
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes an i32 dataset at `prefix` with one document per entry of `lengths`, tokens tagged
// with `tag`. Returns the prefix.
inline std::string write_dataset(const std::string& prefix, const std::vector<int>& lengths, int tag) {
  auto writer = IndexedDatasetWriter::create(prefix, static_cast<uint8_t>(TokenDType::kI32));
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int32_t> tokens(lengths[d]);
    for (int p = 0; p < lengths[d]; ++p) tokens[p] = token_of(tag, static_cast<int>(d), p);
    EXPECT_TRUE((*writer)->add_document(tokens).ok());
  }
  DatasetMeta meta;
  meta.vocab_size = 50257;
  meta.tokenizer_path = "tok/tokenizer.json";
  meta.tokenizer_hash = "abc";
  Status s = (*writer)->finish(meta);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return prefix;
}

// Document lengths that vary (between 5 and 5 + spread - 1), deterministic in `n`.
inline std::vector<int> varied_lengths(int n, int spread = 40) {
  std::vector<int> lengths;
  for (int d = 0; d < n; ++d) lengths.push_back(5 + (d * 37 + 11) % spread);
  return lengths;
}

// A two-source mixture over datasets "a" (tag 1, weight 0.75) and "b" (tag 2, weight 0.25).
inline MixtureConfig two_source_mixture(const PlanDir& dir, int64_t samples = 200) {
  MixtureConfig config;
  config.sources = {{"a", write_dataset(dir.file("a"), varied_lengths(60), 1), 0.75},
                    {"b", write_dataset(dir.file("b"), varied_lengths(40, 25), 2), 0.25}};
  config.seq_len = 16;
  config.seed = 7;
  config.total_samples = samples;
  config.validation.fraction = 0.2;
  config.validation.samples = 24;
  return config;
}

// Plans `config` into `path`; fails the test on error.
inline void plan_or_fail(const MixtureConfig& config, const std::string& path) {
  Result<PlannedMixture> info = plan_mixture(config, path);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
}

}  // namespace ms::data::testing
