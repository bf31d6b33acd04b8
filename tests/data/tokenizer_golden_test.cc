// GPT-2 encodings checked token for token against js-tiktoken's (tests/golden/tokenizer/), and
// the same tokenizer loaded from tokenizer.json and from a tiktoken rank file written from its
// vocabulary: the two loaders and the reference must agree on every text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "data/tokenizer_bpe.h"
#include "io/atomic_file.h"
#include "tokenizer_test_util.h"

namespace ms::data {
namespace {

using nlohmann::json;

struct GoldenCase {
  std::string name, text;
  std::vector<int32_t> ids;
};

std::vector<GoldenCase> load_golden() {
  Result<std::string> text = io::read_file(source_path("tests/golden/tokenizer/gpt2_golden.json"));
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  std::vector<GoldenCase> cases;
  const json golden = json::parse(*text);
  for (const json& c : golden.at("cases")) {
    cases.push_back({c.at("name"), c.at("text"), c.at("ids").get<std::vector<int32_t>>()});
  }
  return cases;
}

TEST(TokenizerGolden, Gpt2MatchesJsTiktokenTokenForToken) {
  const auto& tok = gpt2();
  const std::vector<GoldenCase> cases = load_golden();
  ASSERT_GE(cases.size(), 15u);
  for (const GoldenCase& c : cases) {
    EXPECT_EQ(tok.encode(c.text), c.ids) << "case " << c.name;
    Result<std::string> decoded = tok.decode(c.ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c.text) << "case " << c.name;
  }
}

std::string base64(const std::string& bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t chunk = 0;
    for (size_t k = 0; k < 3; ++k) {
      chunk = (chunk << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    }
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(chunk >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// Writes GPT-2's vocabulary as a tiktoken rank file: base64 of each token's bytes, rank = id.
std::string write_gpt2_tiktoken(const BpeTokenizer& tok, const TempDir& dir) {
  std::string file;
  for (int32_t id = 0; id < 50256; ++id) file += base64(tok.token_bytes(id)) + " " + std::to_string(id) + "\n";
  return write_test_file(dir, "gpt2.tiktoken", file);
}

TEST(TokenizerGolden, Base64EncoderUsedForTheRankFileIsStandard) {
  EXPECT_EQ(base64("Man"), "TWFu");
  EXPECT_EQ(base64("Ma"), "TWE=");
  EXPECT_EQ(base64("M"), "TQ==");
}

TEST(TokenizerGolden, TiktokenFileFromGpt2VocabularyEncodesIdentically) {
  const auto& json_tok = gpt2();
  TempDir dir;
  const std::string path = write_gpt2_tiktoken(static_cast<const BpeTokenizer&>(json_tok), dir);
  Result<std::unique_ptr<Tokenizer>> tik = Tokenizer::load(path);
  ASSERT_TRUE(tik.ok()) << tik.status().to_string();
  EXPECT_EQ((*tik)->kind(), "tiktoken");
  EXPECT_EQ((*tik)->vocab_size(), 50257);
  EXPECT_EQ((*tik)->eos_id(), 50256);
  for (const GoldenCase& c : load_golden()) {
    EXPECT_EQ((*tik)->encode(c.text), c.ids) << "case " << c.name;
  }
}

}  // namespace
}  // namespace ms::data
