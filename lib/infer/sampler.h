// Next-token sampling: greedy, temperature, top-k and top-p (nucleus), with the random draw a
// pure function of (request seed, completion index) through Philox. A request therefore
// produces the same tokens whichever batch, step or order it is served in.
#pragma once

#include <cstdint>

namespace ms::infer {

struct SamplingParams {
  double temperature = 0.0;  // <= 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: all tokens
  double top_p = 1.0;        // keep the smallest most-likely set whose probability is >= top_p
  uint64_t seed = 0;
};

// logits: (vocab). Returns the token for completion index `index` (0 for the first generated
// token). Candidates are ordered by logit, then id, so the result is deterministic.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& params,
                     int64_t index);

// The argmax of logits: (vocab), lowest id on ties.
int32_t argmax(const float* logits, int64_t vocab);

}  // namespace ms::infer
