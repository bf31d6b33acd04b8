// Helpers shared by the dataset tests: a byte tokenizer (id = byte value, end-of-document id
// 256) that makes expected token streams obvious, and small file helpers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "io/atomic_file.h"
#include "tests/io/temp_dir.h"

namespace ms::data::testing {

using io::testing::TempDir;

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(int32_t vocab_size = 257, int32_t eos = 256)
      : vocab_size_(vocab_size), eos_(eos), hash_("bytes-" + std::to_string(vocab_size)) {}

  std::vector<int32_t> encode(std::string_view text, bool = true) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  }
  Result<std::string> decode(std::span<const int32_t> ids) const override {
    std::string text;
    for (int32_t id : ids) {
      if (id < 0 || id >= 256) return InvalidArgument("not a byte id: " + std::to_string(id));
      text += static_cast<char>(id);
    }
    return text;
  }
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  int32_t eos_id() const override { return eos_; }
  const std::string& content_hash() const override { return hash_; }
  std::string kind() const override { return "test-bytes"; }

 private:
  int32_t vocab_size_;
  int32_t eos_;
  std::string hash_;
};

inline void write_text(const std::string& path, std::string_view contents) {
  ASSERT_TRUE(io::write_file_atomic(path, contents).ok()) << path;
}

inline std::string read_text(const std::string& path) {
  Result<std::string> text = io::read_file(path);
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : std::string();
}

// Bytes from a list of values of the given width, little-endian, for literal expected files.
template <typename T>
std::string le_bytes(std::initializer_list<T> values) {
  std::string out;
  for (T v : values) out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  return out;
}

}  // namespace ms::data::testing
