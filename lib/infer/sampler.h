// Next-token sampling: greedy, temperature, top-k and top-p (nucleus), with the random draw a
// pure function of (request seed, completion index) through Philox. A request therefore
// produces the same tokens whichever batch, step or order it is served in.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ms::infer {

struct SamplingParams {
  double temperature = 0.0;  // <= 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: all tokens
  double top_p = 1.0;        // keep the smallest most-likely set whose probability is >= top_p
  uint64_t seed = 0;
};

// logits: (vocab). Returns the token for completion index `index` (0 for the first generated
// token). Candidates are ordered by logit, then id, so the result is deterministic; when
// top-k and top-p cut nothing they are taken in id order (no sort of the vocabulary).
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     int64_t index);

// The first row of logits (rows, vocab) holding an infinity or a NaN; -1 when all are finite.
// Serving checks every row it samples or scores with it: argmax and the sampler would turn a
// row of NaNs into token 0 (GPT-2's "!") and perplexity into NaN, without a word. Scanning a
// row costs vocab comparisons next to the vocab x d_model multiply-adds that made it.
int64_t first_non_finite_row(const float* logits, int64_t rows, int64_t vocab);

// The argmax of logits: (vocab), lowest id on ties.
int32_t argmax(const float* logits, int64_t vocab);

// The distribution sample_token draws from at temperature > 0, over the whole vocabulary:
// softmax at the temperature over the top-k candidates, cut to the top-p nucleus and
// renormalized, zero for every other id. (vocab) doubles summing to 1. Speculative decoding
// (infer/speculative.h) compares the target's and the draft's distributions after the same
// transforms.
std::vector<double> token_distribution(const float* logits, int64_t vocab,
                                       const SamplingParams& params);

// The token a uniform u in [0, 1) picks from probs (non-negative, any positive total) by its
// cumulative sum in id order; the last id with positive probability when rounding leaves u
// past the end.
int32_t sample_distribution(std::span<const double> probs, double u);

}  // namespace ms::infer
