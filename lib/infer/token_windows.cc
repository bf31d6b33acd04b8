// Windows are cut from the start so the same source and sizes always give the same windows.
#include "infer/token_windows.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "data/indexed_dataset.h"
#include "io/atomic_file.h"

namespace ms::infer {
namespace {

// At most `limit` tokens (0: all) of the dataset's sequences, in order.
Result<std::vector<int32_t>> dataset_tokens(const std::string& prefix, size_t limit) {
  MS_ASSIGN_OR_RETURN(const data::IndexedDataset ds, data::IndexedDataset::open(prefix));
  std::vector<int32_t> tokens;
  for (size_t s = 0; s < ds.num_sequences(); ++s) {
    if (limit > 0 && tokens.size() >= limit) break;
    const size_t len = static_cast<size_t>(ds.sequence_length(s));
    const size_t take = limit > 0 ? std::min(len, limit - tokens.size()) : len;
    const size_t at = tokens.size();
    tokens.resize(at + take);
    ds.read_tokens(s, 0, take, tokens.data() + at);
  }
  return tokens;
}

}  // namespace

void TokenWindows::split(int64_t first, int64_t n, std::vector<int32_t>& inputs,
                         std::vector<int32_t>& targets) const {
  inputs.resize(static_cast<size_t>(n * seq_len));
  targets.resize(inputs.size());
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* w = window(first + i);
    std::copy_n(w, seq_len, inputs.data() + i * seq_len);
    std::copy_n(w + 1, seq_len, targets.data() + i * seq_len);
  }
}

Result<TokenWindows> read_token_windows(const std::string& source, const data::Tokenizer& tokenizer,
                                        int64_t seq_len, int64_t max_windows, int64_t vocab_size,
                                        std::string_view length_flag) {
  if (seq_len < 1 || seq_len == std::numeric_limits<int64_t>::max()) {
    return InvalidArgument(std::string(length_flag) + " " + std::to_string(seq_len) +
                           ": a window of " + source + " needs from 1 to 2^63 - 2 tokens");
  }
  const size_t window = static_cast<size_t>(seq_len + 1);
  // A limit past what size_t counts is no limit: no source holds that many tokens.
  size_t limit = 0;
  if (max_windows > 0 &&
      __builtin_mul_overflow(static_cast<size_t>(max_windows), window, &limit)) {
    limit = 0;
  }
  std::error_code ec;
  std::vector<int32_t> tokens;
  if (std::filesystem::exists(source + ".idx", ec)) {
    MS_ASSIGN_OR_RETURN(tokens, dataset_tokens(source, limit));
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0 || tokens[i] >= vocab_size) {
        return InvalidArgument(source + ": token " + std::to_string(i) + " is " +
                               std::to_string(tokens[i]) + ", outside the model's vocabulary of " +
                               std::to_string(vocab_size));
      }
    }
  } else {
    MS_ASSIGN_OR_RETURN(const std::string text,
                        io::read_file(source, io::kMaxTextFileBytes, "text file"));
    tokens = tokenizer.encode(text, /*allow_special=*/false);
  }
  TokenWindows w;
  w.seq_len = seq_len;
  const size_t whole = tokens.size() / window;
  if (whole == 0) {
    return InvalidArgument(source + ": " + std::to_string(tokens.size()) +
                           " tokens, fewer than one window of " + std::to_string(window) +
                           " (" + std::string(length_flag) + " + 1)");
  }
  const size_t n = limit > 0 ? std::min(whole, static_cast<size_t>(max_windows)) : whole;
  tokens.resize(n * window);
  w.tokens = std::move(tokens);
  return w;
}

}  // namespace ms::infer
