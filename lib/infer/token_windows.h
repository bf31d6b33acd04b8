// Evaluation and calibration text for a served model: windows of seq_len + 1 consecutive
// tokens (seq_len inputs, each predicting the next) cut back to back from a Megatron indexed
// dataset (`ms-data build`'s <prefix>.bin/.idx, its sequences concatenated in order) or from a
// text file encoded with the model's tokenizer. Perplexity (perplexity.h) and the bit
// allocation's sensitivities (quant_sensitivity.h) read them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"

namespace ms::infer {

struct TokenWindows {
  int64_t seq_len = 0;
  std::vector<int32_t> tokens;  // (count(), seq_len + 1) row-major
  int64_t count() const {
    return seq_len > 0 ? static_cast<int64_t>(tokens.size()) / (seq_len + 1) : 0;
  }
  const int32_t* window(int64_t i) const { return tokens.data() + i * (seq_len + 1); }
  // The windows [first, first + n) as inputs (n, seq_len) and targets (n, seq_len).
  void split(int64_t first, int64_t n, std::vector<int32_t>& inputs,
             std::vector<int32_t>& targets) const;
};

// The first `max_windows` windows (0: every whole window) of `source`: a dataset prefix when
// <source>.idx exists, else a text file. InvalidArgument naming the source when seq_len is
// below 1, when it holds less than one window, or when a dataset token is outside
// [0, vocab_size); the dataset's and the file's own errors otherwise. `length_flag` is the
// flag that gave seq_len ("--seq-len", "--calibration-len"), for the messages.
Result<TokenWindows> read_token_windows(const std::string& source, const data::Tokenizer& tokenizer,
                                        int64_t seq_len, int64_t max_windows, int64_t vocab_size,
                                        std::string_view length_flag);

}  // namespace ms::infer
