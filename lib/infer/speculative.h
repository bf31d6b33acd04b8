// Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via
// Speculative Decoding"; Chen et al. 2023, "Accelerating Large Language Model Decoding with
// Speculative Sampling"). A small draft model with the target's tokenizer proposes k tokens one
// at a time; the target scores all k + 1 positions in one forward, and this rule keeps a prefix
// of the proposal so that every emitted token is distributed exactly as the target alone would
// sample it. The engine (infer/engine.h) runs the rounds; this file holds the rule itself, so
// that it can be tested on hand-made distributions.
#pragma once

#include <cstdint>
#include <span>

#include "infer/sampler.h"

namespace ms::infer {

struct DraftVerdict {
  bool accepted = false;
  int32_t token = 0;  // the draft token when accepted, else the replacement
};

// p, q: the target's and the draft's distributions over the vocabulary for one position (each
// non-negative, summing to 1, after the same temperature/top-k/top-p transforms:
// token_distribution), x: the draft's token, drawn from q. The draft token is accepted with
// probability min(1, p(x)/q(x)), decided by u_accept in [0, 1); otherwise the replacement is
// drawn with u_resample from normalize(max(0, p - q)). The result is then distributed as p for
// any q. When p - q has no positive part (p == q up to rounding, where a rejection has
// probability ~0), the replacement is drawn from p.
DraftVerdict verify_draft_token(std::span<const double> p, std::span<const double> q, int32_t x,
                                double u_accept, double u_resample);

// The uniforms of speculative decoding, each a pure function of (request seed, completion
// index of the token being decided, purpose), so a request's output depends on its seed, the
// draft and k, never on the batch it shares or the step it is served in.
enum class SpecDraw : uint8_t { kDraft, kAccept, kResample, kBonus };
double spec_uniform(const SamplingParams& params, int64_t index, SpecDraw draw);

}  // namespace ms::infer
