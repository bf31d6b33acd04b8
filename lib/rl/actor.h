// The actor's side of an RL update on the training model (model::Transformer): the log-prob and
// entropy of every response token under the current weights, and the backward of a loss given
// by its gradient with respect to those log-probs. Samples of different lengths are packed
// into padded (B, T) micro-batches of at most `micro_batch` samples; padding sits after each
// sample's last token, where a causal model's earlier positions never see it, and gets weight 0.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/transformer.h"
#include "rl/response_layout.h"

namespace ms::rl {

// Samples per forward in the RL loop's policy evaluations and backward passes: bounds the
// (B, T, vocab) logits held at once.
inline constexpr int64_t kPolicyMicroBatch = 8;

struct Sample {
  std::vector<int32_t> prompt;    // at least one token
  std::vector<int32_t> response;  // may be empty (the model ended at once)
};

// One padded micro-batch: inputs/targets (B, T) with `pad` after each sample, and for each
// response token (in sample order) its flat position in (B, T): response token j of a sample
// is predicted at position prompt_len - 1 + j. Shared by the actor and the critic (critic.h),
// which reads its value of a response token at the same position.
struct PackedSamples {
  std::vector<int32_t> inputs, targets;
  std::vector<int64_t> positions;
  int64_t B = 0, T = 0;
};

// InvalidArgument for an empty prompt or a sample longer than max_seq_len.
Result<PackedSamples> pack_samples(std::span<const Sample* const> samples, int32_t pad,
                                   int64_t max_seq_len);

// Packs `samples` in order into micro-batches of at most `micro_batch` samples and calls fn on
// each one that holds a response token; the first error (packing's or fn's) ends the walk.
// The actor's and the critic's passes all walk their samples this way.
Status for_each_micro_batch(std::span<const Sample* const> samples, int64_t micro_batch,
                            int32_t pad, int64_t max_seq_len,
                            const std::function<Status(const PackedSamples&)>& fn);

// The layout of the samples' responses, in sample order.
Result<ResponseLayout> response_layout(std::span<const Sample* const> samples);

struct PolicyEval {
  std::vector<double> log_probs;  // per response token, layout order
  std::vector<double> entropy;    // of the next-token distribution at each response token
};

// Forward only (Transformer::forward_log_probs: collective over a tensor-parallel actor's tp
// group). InvalidArgument for an empty prompt or a sample longer than the model's context.
Result<PolicyEval> evaluate_policy(model::Transformer& model,
                                   std::span<const Sample* const> samples, int64_t micro_batch,
                                   int32_t pad_token);

// Accumulates into the model's gradients d(loss)/d(param) for a loss whose gradient with respect
// to each response token's log-prob is grad_log_probs (layout order), through
// Transformer::forward_backward_weighted with weight -g (CE = -log p).
Status backward_policy(model::Transformer& model, std::span<const Sample* const> samples,
                       std::span<const double> grad_log_probs, int64_t micro_batch,
                       int32_t pad_token);

}  // namespace ms::rl
