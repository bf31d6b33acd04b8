// Byte-fallback BPE with the Metaspace pre-tokenizer (the tokenizer.json of Llama-2 and
// Mistral), on a hand-made tokenizer whose expected encodings were worked out by hand:
//   vocab: <unk>=0 <s>=1 </s>=2, <0x00>..<0xFF> = 3..258, ▁=259 h=260 e=261 l=262 o=263 w=264
//          r=265 d=266, then the merge results ▁h=267 ll=268 ▁he=269 ▁hell=270 ▁hello=271
//          or=272 ▁w=273 ▁wor=274
//   merges (rank order): ▁ h, l l, ▁h e, ▁he ll, ▁hell o, o r, ▁ w, ▁w or
#include <gtest/gtest.h>

#include <random>

#include "data/tokenizer.h"
#include "tokenizer_test_util.h"

namespace ms::data {
namespace {

std::string vocab_json() {
  std::string v = R"("<unk>": 0, "<s>": 1, "</s>": 2)";
  char name[16];
  for (int b = 0; b < 256; ++b) {
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    v += ", \"" + std::string(name) + "\": " + std::to_string(3 + b);
  }
  const char* rest[] = {"▁", "h", "e", "l", "o", "w", "r", "d", "▁h", "ll", "▁he", "▁hell", "▁hello", "or", "▁w", "▁wor"};
  int id = 259;
  for (const char* t : rest) v += ", \"" + std::string(t) + "\": " + std::to_string(id++);
  return "{" + v + "}";
}

// `front` holds the normalizer and pre_tokenizer keys of the variant under test.
std::string tokenizer_json(const std::string& front) {
  return R"({"version": "1.0", "added_tokens": [
    {"id": 0, "content": "<unk>", "special": true}, {"id": 1, "content": "<s>", "special": true},
    {"id": 2, "content": "</s>", "special": true}], )" + front +
         R"(, "model": {"type": "BPE", "byte_fallback": true, "fuse_unk": true, "unk_token": "<unk>",
    "vocab": )" + vocab_json() +
         R"(, "merges": ["▁ h", "l l", "▁h e", "▁he ll", "▁hell o", "o r", "▁ w", "▁w or"]}})";
}

// Mistral style: Metaspace pre-tokenizer, prefix only at the start of the text.
const std::string kMistral =
    R"("normalizer": null, "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": false})";
// Llama-2 style: the legacy normalizer prepends ▁ to every segment between special tokens.
const std::string kLlama2 =
    R"("normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
       {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]}, "pre_tokenizer": null)";

std::unique_ptr<Tokenizer> load(const std::string& front, const TempDir& dir) {
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(write_test_file(dir, "tokenizer.json", tokenizer_json(front)));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

using Ids = std::vector<int32_t>;

TEST(MetaspaceBpe, MergesWordsAfterReplacingSpaces) {
  TempDir dir;
  auto tok = load(kMistral, dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->kind(), "byte-fallback-bpe");
  EXPECT_EQ(tok->vocab_size(), 275);
  EXPECT_EQ(tok->eos_id(), 2);
  // "▁hello▁world": ▁h, ll, ▁he, ▁hell, ▁hello, or, ▁w, ▁wor -> ▁hello ▁wor l d
  EXPECT_EQ(tok->encode("hello world"), (Ids{271, 274, 262, 266}));
  EXPECT_EQ(*tok->decode(Ids{271, 274, 262, 266}), "hello world");
}

TEST(MetaspaceBpe, UnknownCharactersFallBackToByteTokens) {
  TempDir dir;
  auto tok = load(kMistral, dir);
  ASSERT_NE(tok, nullptr);
  // é is not in the vocabulary: its UTF-8 bytes C3 A9 become <0xC3> <0xA9> = 198, 172.
  EXPECT_EQ(tok->encode("héllo"), (Ids{267, 198, 172, 268, 263}));
  EXPECT_EQ(*tok->decode(Ids{267, 198, 172, 268, 263}), "héllo");
  // A byte that is not UTF-8 at all becomes its own byte token.
  EXPECT_EQ(tok->encode("\xFF"), (Ids{259, 258}));
}

TEST(MetaspaceBpe, PrependSchemeFirstOnlyPrefixesTheStartOfTheText) {
  TempDir dir;
  auto tok = load(kMistral, dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("<s>hello"), (Ids{1, 260, 261, 268, 263}));
  EXPECT_EQ(tok->encode("<s>hello", /*allow_special=*/false).front(), 259);  // "<" via bytes after ▁
}

TEST(MetaspaceBpe, LegacyLlama2NormalizerPrefixesEverySegment) {
  TempDir dir;
  auto tok = load(kLlama2, dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->encode("hello world"), (Ids{271, 274, 262, 266}));
  EXPECT_EQ(tok->encode("<s>hello"), (Ids{1, 271}));
  EXPECT_NE(tok->content_hash(), load(kMistral, dir)->content_hash());
}

TEST(MetaspaceBpe, RoundTripsTextWithoutLeadingSpaceOrMetaspace) {
  TempDir dir;
  auto tok = load(kMistral, dir);
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(99);
  const std::vector<std::string> fragments = {"hello", " ", "world", "é", "中", "\xFF", "\xC3", "ll", "x"};
  for (int trial = 0; trial < 500; ++trial) {
    std::string text = "h";  // never a leading space: Metaspace decoding drops one
    for (int i = static_cast<int>(rng() % 12); i > 0; --i) text += fragments[rng() % fragments.size()];
    ASSERT_EQ(*tok->decode(tok->encode(text)), text) << "trial " << trial;
  }
}

TEST(MetaspaceBpe, BpeWithoutByteFallbackOrByteLevelIsRefused) {
  TempDir dir;
  std::string text = tokenizer_json(kMistral);
  text.replace(text.find("\"byte_fallback\": true"), 21, "\"byte_fallback\": false");
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(write_test_file(dir, "t.json", text));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("model.byte_fallback"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace ms::data
