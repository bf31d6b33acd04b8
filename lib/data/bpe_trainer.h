// Learns a byte-level BPE from text, the way GPT-2's tokenizer was made: text is pre-split with
// the named regex, each distinct piece is counted once, and the most frequent adjacent pair is
// merged until the vocabulary is full. Pair counts are kept incrementally (each merge touches
// only the words that contain the pair, found through a pair -> words index; a lazy max-heap
// picks the next pair), so 8k merges over a few MB take seconds. Ties are broken by the smaller
// (left id, right id), so training is deterministic. The result is written as a Hugging Face
// tokenizer.json that Tokenizer::load (and Hugging Face's tokenizers) can read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "data/bpe_model.h"
#include "data/pretokenize.h"

namespace ms::data {

struct BpeTrainerOptions {
  int32_t vocab_size = 8192;  // learned tokens + 256 bytes + special tokens
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  int64_t min_frequency = 2;  // stop when the best pair occurs fewer times
  std::string split_pattern = "gpt2";  // a named_split_pattern()
};

struct TrainedBpe {
  std::vector<std::string> tokens;                 // id -> bytes; ids 0-255 are the bytes
  std::vector<std::pair<int32_t, int32_t>> merges;  // in the order learned (= rank)
  std::vector<std::string> special_tokens;         // ids tokens.size(), tokens.size() + 1, ...
  std::string split_pattern;
};

class BpeTrainer {
 public:
  // InvalidArgument when the vocabulary cannot hold the 256 bytes and the special tokens, or the
  // split pattern name is unknown.
  static Result<std::unique_ptr<BpeTrainer>> create(BpeTrainerOptions options);

  // Counts the pieces of one document. Special tokens written in it are cut out first, so no
  // merge is learned across them.
  void add_text(std::string_view text);
  int64_t distinct_pieces() const { return static_cast<int64_t>(piece_counts_.size()); }

  // Learns merges until vocab_size is reached or no pair occurs min_frequency times.
  TrainedBpe train() const;

 private:
  BpeTrainer(BpeTrainerOptions options, std::shared_ptr<const SplitRegex> regex)
      : options_(std::move(options)), regex_(std::move(regex)) {}
  void count_pieces(std::string_view text);

  BpeTrainerOptions options_;
  std::shared_ptr<const SplitRegex> regex_;
  StringMap<int64_t> piece_counts_;
};

// The tokenizer.json text of a trained BPE (ByteLevel pre-tokenizer; the split regex as a Split
// step unless it is GPT-2's, which ByteLevel applies itself).
std::string trained_bpe_to_json(const TrainedBpe& bpe);

}  // namespace ms::data
