// BPE training: the vocabulary reaches the requested size, merges are deterministic, the
// written tokenizer.json loads and round-trips text, and special tokens get their ids.
#include "data/bpe_trainer.h"

#include <gtest/gtest.h>

#include "data/tokenizer.h"
#include "tokenizer_test_util.h"

namespace ms::data {
namespace {

// A corpus with enough distinct words to fill a small vocabulary.
std::string corpus() {
  const std::string shakespeare = *io::read_file(source_path("tests/golden/tokenizer/texts.json"));
  std::string text;
  for (int i = 0; i < 20; ++i) text += shakespeare;
  return text;
}

TrainedBpe train(int32_t vocab_size, const std::string& text, const std::string& pattern = "gpt2") {
  BpeTrainerOptions options;
  options.vocab_size = vocab_size;
  options.split_pattern = pattern;
  Result<std::unique_ptr<BpeTrainer>> trainer = BpeTrainer::create(options);
  EXPECT_TRUE(trainer.ok()) << trainer.status().to_string();
  (*trainer)->add_text(text);
  return (*trainer)->train();
}

std::unique_ptr<Tokenizer> load_trained(const TrainedBpe& bpe, const TempDir& dir) {
  Result<std::unique_ptr<Tokenizer>> t = Tokenizer::load(write_test_file(dir, "tokenizer.json", trained_bpe_to_json(bpe)));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : nullptr;
}

TEST(BpeTrainer, ReachesTheRequestedVocabularySize) {
  const TrainedBpe bpe = train(600, corpus());
  EXPECT_EQ(bpe.tokens.size() + bpe.special_tokens.size(), 600u);
  EXPECT_EQ(bpe.merges.size(), 600u - 256u - 1u);
  TempDir dir;
  auto tok = load_trained(bpe, dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 600);
  EXPECT_EQ(tok->kind(), "byte-level-bpe");
}

TEST(BpeTrainer, MergesAreDeterministic) {
  const std::string text = corpus();
  const TrainedBpe a = train(500, text);
  const TrainedBpe b = train(500, text);
  EXPECT_EQ(a.merges, b.merges);
  EXPECT_EQ(trained_bpe_to_json(a), trained_bpe_to_json(b));
}

TEST(BpeTrainer, FirstMergeIsTheMostFrequentPair) {
  const TrainedBpe bpe = train(258, "aaab aaab aaab xy");  // "aa" occurs 2x per word
  ASSERT_FALSE(bpe.merges.empty());
  EXPECT_EQ(bpe.tokens[256], "aa");
}

TEST(BpeTrainer, TrainedTokenizerRoundTripsAndCompresses) {
  const std::string text = corpus();
  TempDir dir;
  auto tok = load_trained(train(1000, text), dir);
  ASSERT_NE(tok, nullptr);
  const std::string sample = text.substr(0, 4000) + "\xFF unseen bytes \x80 and 😀";
  const std::vector<int32_t> ids = tok->encode(sample);
  EXPECT_EQ(*tok->decode(ids), sample);
  EXPECT_LT(ids.size(), sample.size() / 2);  // merges learned from this text shorten it
}

TEST(BpeTrainer, SpecialTokenGetsTheLastIdAndIsEos) {
  TempDir dir;
  auto tok = load_trained(train(400, corpus() + "<|endoftext|>"), dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), 399);
  EXPECT_EQ(tok->eos_id(), 399);
  EXPECT_EQ(tok->encode("hi<|endoftext|>").back(), 399);
}

TEST(BpeTrainer, OtherSplitPatternsWriteASplitStep) {
  TempDir dir;
  auto tok = load_trained(train(400, corpus(), "cl100k_base"), dir);
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(*tok->decode(tok->encode("Hello 12345 world")), "Hello 12345 world");
}

TEST(BpeTrainer, RejectsTooSmallVocabularyAndUnknownPattern) {
  BpeTrainerOptions small;
  small.vocab_size = 200;
  EXPECT_FALSE(BpeTrainer::create(small).ok());
  BpeTrainerOptions unknown;
  unknown.split_pattern = "bert";
  EXPECT_FALSE(BpeTrainer::create(unknown).ok());
}

}  // namespace
}  // namespace ms::data
