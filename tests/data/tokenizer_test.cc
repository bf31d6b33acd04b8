// Tokenizer behaviour as a user sees it: GPT-2 known encodings, special tokens, the invalid
// UTF-8 rule (decode(encode(x)) == x for any bytes), decode errors, hashes, batch encoding, and
// clear errors for malformed tokenizer files.
#include "data/tokenizer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "data/pretokenize.h"
#include "data/unicode_utf8.h"
#include "tokenizer_test_util.h"

namespace ms::data {
namespace {

TEST(Tokenizer, Gpt2EncodesKnownWords) {
  const Tokenizer& tok = gpt2();
  EXPECT_EQ(tok.kind(), "byte-level-bpe");
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(tok.token_to_id("Ġthe"), 262);
  EXPECT_EQ(tok.token_to_id("<|endoftext|>"), 50256);
  EXPECT_FALSE(tok.token_to_id("not-a-token-at-all").has_value());
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(Tokenizer, EosIsEndOfText) { EXPECT_EQ(gpt2().eos_id(), 50256); }

TEST(Tokenizer, SpecialTokensSplitOutOnlyWhenAllowed) {
  const Tokenizer& tok = gpt2();
  const std::vector<int32_t> allowed = tok.encode("a<|endoftext|>b", /*allow_special=*/true);
  EXPECT_EQ(allowed, (std::vector<int32_t>{64, 50256, 65}));
  const std::vector<int32_t> plain = tok.encode("a<|endoftext|>b", /*allow_special=*/false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(*tok.decode(plain), "a<|endoftext|>b");
}

// Random byte strings, most of them invalid UTF-8, with some ASCII, multi-byte characters and
// special-token text mixed in so every path is exercised.
std::string random_bytes(std::mt19937& rng) {
  static const std::vector<std::string> fragments = {" ", "  ", "\n", "'s", "ab", "é", "中", "😀",
                                                     "\xF0\x9F", "\xE2\x82", "<|endoftext|>", "12"};
  std::string s;
  const int n = static_cast<int>(rng() % 40);
  for (int i = 0; i < n; ++i) {
    if (rng() % 3 == 0) {
      s += fragments[rng() % fragments.size()];
    } else {
      s.push_back(static_cast<char>(rng() % 256));
    }
  }
  return s;
}

TEST(Tokenizer, DecodeOfEncodeIsIdentityForArbitraryBytes) {
  std::mt19937 rng(1234);
  const Tokenizer& tok = gpt2();
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string text = random_bytes(rng);
    for (bool allow_special : {true, false}) {
      Result<std::string> decoded = tok.decode(tok.encode(text, allow_special));
      ASSERT_TRUE(decoded.ok());
      ASSERT_EQ(*decoded, text) << "trial " << trial;
    }
  }
}

TEST(Tokenizer, InvalidUtf8BytesBecomeSingleBytePieces) {
  const Tokenizer& tok = gpt2();
  // 0xFF never occurs in UTF-8; it must be its own token, and not stop "abc" from merging.
  const std::vector<int32_t> ids = tok.encode("abc\xFF" "abc");
  const std::vector<int32_t> abc = tok.encode("abc");
  std::vector<int32_t> expected = abc;
  expected.push_back(*tok.token_to_id("ÿ"));  // byte 0xFF in the byte-level alphabet
  expected.insert(expected.end(), abc.begin(), abc.end());
  EXPECT_EQ(ids, expected);
}

TEST(Tokenizer, DecodeRejectsIdsOutsideTheVocabulary) {
  const Tokenizer& tok = gpt2();
  const std::vector<int32_t> ids = {15496, 50257};
  Result<std::string> decoded = tok.decode(ids);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("token id 50257 at position 1"), std::string::npos);
  const std::vector<int32_t> negative = {-1};
  EXPECT_FALSE(tok.decode(negative).ok());
}

TEST(Tokenizer, ContentHashIgnoresJsonFormatting) {
  TempDir dir;
  const std::string original = *io::read_file(source_path("data/tokenizers/gpt2/tokenizer.json"));
  const std::string compact = nlohmann::json::parse(original).dump();
  Result<std::unique_ptr<Tokenizer>> reloaded = Tokenizer::load(write_test_file(dir, "t.json", compact));
  ASSERT_TRUE(reloaded.ok()) << reloaded.status().to_string();
  EXPECT_EQ((*reloaded)->content_hash(), gpt2().content_hash());
  EXPECT_EQ(gpt2().content_hash().size(), 64u);
}

TEST(Tokenizer, EncodeBatchMatchesEncode) {
  std::vector<std::string> texts;
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) texts.push_back("Document " + std::to_string(i) + ": " + random_bytes(rng));
  for (int threads : {1, 2, 4}) {
    const std::vector<std::vector<int32_t>> batch = encode_batch(gpt2(), texts, threads);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], gpt2().encode(texts[i]));
  }
}

TEST(Tokenizer, NamedSplitPatternsCompileAndCoverTheText) {
  for (const char* name : {"gpt2", "r50k_base", "p50k_base", "cl100k_base", "llama3", "o200k_base"}) {
    Result<std::shared_ptr<const SplitRegex>> regex = SplitRegex::compile(*named_split_pattern(name));
    ASSERT_TRUE(regex.ok()) << name << ": " << regex.status().to_string();
    const std::string text = "Hello world's 12345  \r\n\tÉcole 中文 😀!!";
    std::vector<std::string_view> pieces;
    (*regex)->split(text, pieces);
    std::string joined;
    for (std::string_view p : pieces) joined += p;
    EXPECT_EQ(joined, text) << name;
    EXPECT_GT(pieces.size(), 8u) << name;
  }
  EXPECT_FALSE(named_split_pattern("bert").has_value());
}

TEST(TokenizerErrors, MissingFileNamesIt) {
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("/nonexistent/tokenizer.json"), std::string::npos);
}

TEST(TokenizerErrors, BadJsonNamesLineAndColumn) {
  const Status s = load_error("{\n  \"model\": {\n    \"vocab\": {\"a\": 0,,}\n  }\n}\n");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is not valid JSON at line 3"), std::string::npos) << s.message();
}

TEST(TokenizerErrors, MissingMergesNamesTheKey) {
  const Status s = load_error(tokenizer_json_with_model(R"({"type": "BPE", "vocab": {"a": 0}})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("key 'model.merges' is missing"), std::string::npos) << s.message();
}

TEST(TokenizerErrors, MergeOfUnknownTokenNamesTheEntry) {
  std::string vocab = "{";
  for (int b = 0; b < 256; ++b) {
    vocab += (b ? "," : "") + nlohmann::json(bytes_to_byte_level(std::string(1, static_cast<char>(b)))).dump() +
             ":" + std::to_string(b);
  }
  vocab += "}";
  const Status s = load_error(tokenizer_json_with_model(R"({"type": "BPE", "vocab": )" + vocab +
                                                        R"(, "merges": ["a b", "q zz"]})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("model.merges[0]"), std::string::npos) << s.message();
}

TEST(TokenizerErrors, ByteLevelVocabularyMustCoverAllBytes) {
  const Status s = load_error(tokenizer_json_with_model(R"({"type": "BPE", "vocab": {"a": 0}, "merges": []})"));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no token for byte"), std::string::npos) << s.message();
}

TEST(TokenizerErrors, UnsupportedModelTypeAndDropoutAreRefused) {
  EXPECT_NE(load_error(tokenizer_json_with_model(R"({"type": "WordPiece", "vocab": {}})")).message().find("model.type"),
            std::string::npos);
  EXPECT_NE(load_error(tokenizer_json_with_model(R"({"type": "BPE", "dropout": 0.1, "vocab": {}, "merges": []})"))
                .message()
                .find("model.dropout"),
            std::string::npos);
}

TEST(TokenizerErrors, BadSplitRegexNamesThePattern) {
  const Status s = load_error(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"},
    "behavior": "Isolated"}, "model": {"vocab": {}, "merges": []}})");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pre_tokenizer.pattern.Regex"), std::string::npos) << s.message();
}

TEST(TokenizerErrors, TiktokenBadLineIsNamed) {
  TempDir dir;
  const std::string path = write_test_file(dir, "bad.tiktoken", "IQ== 0\nIg== 1\n!!notbase64 2\n");
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 3"), std::string::npos) << t.status().message();
}

// An id of 2^31 - 1 in a 257-entry file would size the id tables at 68 GB; it is refused by
// key before anything is allocated.
TEST(TokenizerErrors, HugeVocabIdIsRefusedByKey) {
  const Status s = load_error(tokenizer_json_with_model(R"({"type": "BPE", "vocab": )" +
                                                        byte_vocab_json(R"(, "hi": 2147483647)") +
                                                        R"(, "merges": []})"));
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("tokenizer.json"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("model.vocab[\"hi\"]"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("2147483647"), std::string::npos) << s.message();
}

TEST(TokenizerErrors, HugeAddedTokenIdIsRefusedByKey) {
  const std::string text = R"({"added_tokens": [{"id": 2000000000, "content": "<|x|>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": )" +
                           byte_vocab_json("") + R"(, "merges": []}})";
  const Status s = load_error(text);
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("added_tokens[0].id"), std::string::npos) << s.message();
}

// Holes and specials placed well past the vocabulary (tiktoken's cl100k puts one 20 ids out)
// stay within the bound.
TEST(Tokenizer, IdsPastTheVocabularyWithinTheBoundLoad) {
  TempDir dir;
  const std::string text = R"({"added_tokens": [{"id": 100000, "content": "<|endoftext|>", "special": true}],
    "pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": )" +
                           byte_vocab_json("") + R"(, "merges": []}})";
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(write_test_file(dir, "tokenizer.json", text));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->vocab_size(), 100001);
  EXPECT_EQ((*t)->eos_id(), 100000);
}

TEST(TokenizerErrors, DeeplyNestedPreTokenizerIsRefusedNotOverflowingTheStack) {
  std::string nested;
  for (int i = 0; i < 100000; ++i) nested += R"({"type":"Sequence","pretokenizers":[)";
  nested += R"({"type": "ByteLevel"})";
  for (int i = 0; i < 100000; ++i) nested += "]}";
  const Status s = load_error(R"({"pre_tokenizer": )" + nested + R"(, "model": {"vocab": {}, "merges": []}})");
  ASSERT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("deeper than"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ms::data
