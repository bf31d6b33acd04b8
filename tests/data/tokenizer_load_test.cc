// Loading tokenizer.json through the streaming reader (model.vocab and model.merges are read
// as flat lists, the rest as a tree): the same tokenizer and the same errors as reading the whole
// document as a tree, including JSON's repeated-key rule and every malformed entry form. Also
// the batched regex split and the flat piece cache that encoding relies on.
#include <gtest/gtest.h>

#include <random>

#include "data/pretokenize.h"
#include "tokenizer_test_util.h"

namespace ms::data {
namespace {

// A byte-level tokenizer.json whose vocabulary is the 256 bytes plus `extra_vocab`, with
// `merges` (a JSON array's text).
std::string byte_tokenizer(const std::string& extra_vocab, const std::string& merges) {
  return tokenizer_json_with_model(R"({"type": "BPE", "vocab": )" + byte_vocab_json(extra_vocab) +
                                   R"(, "merges": )" + merges + "}");
}

Result<std::unique_ptr<Tokenizer>> load_text(const std::string& contents) {
  TempDir dir;
  return Tokenizer::load(write_test_file(dir, "tokenizer.json", contents));
}

TEST(TokenizerLoad, MergesInEitherFormGiveTheSameTokenizer) {
  Result<std::unique_ptr<Tokenizer>> strings = load_text(byte_tokenizer(R"(, "hi": 256)", R"(["h i"])"));
  Result<std::unique_ptr<Tokenizer>> pairs = load_text(byte_tokenizer(R"(, "hi": 256)", R"([["h", "i"]])"));
  ASSERT_TRUE(strings.ok()) << strings.status().to_string();
  ASSERT_TRUE(pairs.ok()) << pairs.status().to_string();
  EXPECT_EQ((*strings)->content_hash(), (*pairs)->content_hash());
  EXPECT_EQ((*strings)->encode("hi hi"), (std::vector<int32_t>{256, ' ', 256}));
  EXPECT_EQ((*pairs)->encode("hi hi"), (*strings)->encode("hi hi"));
}

// A JSON object with a key written twice holds the last value; the vocabulary follows that rule.
TEST(TokenizerLoad, RepeatedVocabKeyKeepsTheLastId) {
  Result<std::unique_ptr<Tokenizer>> t = load_text(byte_tokenizer(R"(, "hi": 300, "hi": 257)", R"(["h i"])"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->token_to_id("hi"), 257);
  EXPECT_EQ((*t)->encode("hi"), (std::vector<int32_t>{257}));
}

// Only the last "model" counts, streamed parts included.
TEST(TokenizerLoad, RepeatedModelKeyKeepsTheLastModel) {
  const std::string good = R"({"type": "BPE", "vocab": )" + byte_vocab_json(R"(, "hi": 256)") +
                           R"(, "merges": ["h i"]})";
  const std::string bad = R"({"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  const std::string head = R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": )";
  Result<std::unique_ptr<Tokenizer>> last_good = load_text(head + bad + R"(, "model": )" + good + "}");
  ASSERT_TRUE(last_good.ok()) << last_good.status().to_string();
  EXPECT_EQ((*last_good)->encode("hi"), (std::vector<int32_t>{256}));
  const Status last_bad = load_error(head + good + R"(, "model": )" + bad + "}");
  EXPECT_NE(last_bad.message().find("no token for byte"), std::string::npos) << last_bad.message();
  // A model whose merges are replaced by a value that is not an array is refused as such.
  const Status replaced = load_error(head + R"({"type": "BPE", "vocab": )" + byte_vocab_json("") +
                                     R"(, "merges": [], "merges": {}}})");
  EXPECT_NE(replaced.message().find("key 'model.merges' must be an array"), std::string::npos) << replaced.message();
}

TEST(TokenizerErrors, MalformedMergeEntriesAreRefusedByIndex) {
  for (const std::string entry : {"5", "null", "true", R"({"h": "i"})", R"(["h"])", R"(["h", "i", "x"])",
                                  R"([["h"], "i"])", R"(["h", 1])", R"("hi")", R"("h i x")"}) {
    const Status s = load_error(byte_tokenizer(R"(, "hi": 256)", R"(["h i", )" + entry + R"(, "h i"])"));
    ASSERT_FALSE(s.ok()) << entry;
    EXPECT_NE(s.message().find("key 'model.merges[1]'"), std::string::npos) << entry << ": " << s.message();
  }
}

TEST(TokenizerErrors, VocabValuesThatAreNotIdsAreRefusedByKey) {
  for (const std::string value : {R"("5")", "1.5", "-3", "[1]", R"({"id": 1})", "null", "18446744073709551615"}) {
    const Status s = load_error(byte_tokenizer(R"(, "hi": )" + value, "[]"));
    ASSERT_FALSE(s.ok()) << value;
    EXPECT_NE(s.message().find("key 'model.vocab[\"hi\"]' must be a non-negative 32-bit integer id"),
              std::string::npos)
        << value << ": " << s.message();
  }
}

TEST(TokenizerErrors, VocabAndMergesOfTheWrongTypeAreRefused) {
  EXPECT_NE(load_error(tokenizer_json_with_model(R"({"type": "BPE", "vocab": [], "merges": []})"))
                .message()
                .find("key 'model.vocab' must be an object"),
            std::string::npos);
  EXPECT_NE(load_error(tokenizer_json_with_model(R"({"type": "BPE", "vocab": )" + byte_vocab_json("") +
                                                 R"(, "merges": "h i"})"))
                .message()
                .find("key 'model.merges' must be an array"),
            std::string::npos);
}

// Text that exercises every branch of the named patterns: letters with and without leading
// spaces, contractions, digit runs, punctuation, whitespace runs and line ends, non-Latin text.
std::string mixed_text(uint32_t seed, size_t words) {
  static const char* const kParts[] = {"Hello", " world", "'s", "'ll", " 12345", "7", "  ", "\n", "\r\n",
                                       "\t", "!!", " ?", " École", " 中文", "😀", "...", "   \n\n", "x"};
  std::mt19937 rng(seed);
  std::string text;
  for (size_t i = 0; i < words; ++i) text += kParts[rng() % std::size(kParts)];
  return text;
}

TEST(SplitRegex, BatchedSplitGivesTheWholeSplit) {
  for (const char* name : {"gpt2", "cl100k_base", "llama3", "o200k_base"}) {
    Result<std::shared_ptr<const SplitRegex>> regex = SplitRegex::compile(*named_split_pattern(name));
    ASSERT_TRUE(regex.ok()) << name;
    const std::string text = mixed_text(7, 2000);
    std::vector<std::string_view> whole;
    (*regex)->split(text, whole);
    for (size_t batch : {1, 2, 3, 7, 64}) {
      std::vector<std::string_view> batched;
      size_t calls = 0;
      for (size_t from = 0; from < text.size(); ++calls) {
        const size_t before = batched.size();
        from = (*regex)->split(text, from, batched, batch);
        ASSERT_GT(batched.size(), before) << name << " batch " << batch;
      }
      ASSERT_EQ(batched.size(), whole.size()) << name << " batch " << batch;
      for (size_t i = 0; i < whole.size(); ++i) {
        // The same pieces at the same places, not only equal text.
        ASSERT_EQ(batched[i].data(), whole[i].data()) << name << " batch " << batch << " piece " << i;
        ASSERT_EQ(batched[i].size(), whole[i].size()) << name << " batch " << batch << " piece " << i;
      }
      if (batch == 1) {
        EXPECT_GE(calls, whole.size() / 2) << name;
      }
    }
  }
}

// Far more distinct pieces than the cache holds (64 shards x 4096), so every shard is cleared
// several times while encoding: the ids must not depend on what the cache holds.
TEST(Tokenizer, EncodingDoesNotDependOnTheCache) {
  std::string text;
  for (int i = 0; i < 400000; ++i) {
    text += ' ';
    for (int v = i; ; v /= 26) {
      text += static_cast<char>('a' + v % 26);
      if (v < 26) break;
    }
  }
  Result<std::unique_ptr<Tokenizer>> fresh = Tokenizer::load(source_path("data/tokenizers/gpt2/tokenizer.json"));
  ASSERT_TRUE(fresh.ok());
  (*fresh)->encode(mixed_text(3, 50000));  // fills its cache with other pieces first
  const std::vector<int32_t> first = gpt2().encode(text);
  EXPECT_EQ(gpt2().encode(text), first);
  EXPECT_EQ((*fresh)->encode(text), first);
  Result<std::string> decoded = gpt2().decode(first);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, text);
}

}  // namespace
}  // namespace ms::data
