// The value model of PPO and VAPO (docs/rl.md, "PPO and VAPO"): a critic with the actor's
// architecture whose lm_head is replaced by a value head, as verl's critic is a
// token-classification model with one label. Its trunk is a model::Transformer holding the
// embedding and every layer but no final norm or lm_head (a first, non-last pipeline chunk, so
// stage_forward hands back the residual stream); the head is its own final RMSNorm and a linear
// map to one number, v = w . rmsnorm(h) + b. The value of response token j is read at the
// position that predicts it (prompt_len - 1 + j, actor.h's PackedSamples): the state before
// the token is generated, where the actor reads the token's log-prob.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/status.h"
#include "model/transformer.h"
#include "rl/actor.h"

namespace ms::rl {

class Critic {
 public:
  // The trunk and the head's norm start as copies of `actor`'s embedding, layers and final
  // norm (verl's critic loads the actor's model by default; VAPO's starts from a reward model,
  // which this toolkit has none of, and its value pretraining is what removes the start's
  // bias), the score weight and bias at 0, so every value starts at 0. With `tp` (the actor's
  // tensor-parallel group; null: none) the trunk holds the same slices as the actor and every
  // method is collective over tp; the head is whole on every tp rank, fed the residual stream
  // every tp rank holds alike.
  static Result<std::unique_ptr<Critic>> create(const model::Transformer& actor,
                                                comm::Communicator* tp = nullptr);

  // The value of every response token (layout order), forward only.
  Result<std::vector<double>> values(std::span<const Sample* const> samples, int64_t micro_batch,
                                     int32_t pad);
  // Accumulates into every parameter's gradient d(loss)/d(param) for a loss whose gradient
  // with respect to each response token's value is grad_values (layout order); MoE aux and z
  // losses of the trunk enter with weight 1, as in the actor's backward. InvalidArgument when
  // grad_values does not hold one entry per response token.
  Status backward(std::span<const Sample* const> samples, std::span<const double> grad_values,
                  int64_t micro_batch, int32_t pad);

  // The trunk's parameters (the actor's names), then the head's: value_head.norm.weight,
  // value_head.score.weight (d_model) and value_head.score.bias (1). Checkpoints prefix each
  // name with "critic.". The vector's elements never move.
  std::vector<model::Parameter*> parameters();

 private:
  Critic() = default;
  // Runs one micro-batch through the trunk (kept for a backward when `backward`) and the head
  // at the response positions: their rows, the head's normed rows and rstd, and the values.
  struct HeadPass {
    std::vector<float> rows, normed, rstd;
    std::vector<double> values;
  };
  Result<HeadPass> forward(const PackedSamples& p, bool backward);

  std::unique_ptr<model::Transformer> trunk_;
  std::vector<model::Parameter> head_;  // norm weight, score weight, score bias
  float norm_eps_ = 1e-5f;
  int64_t d_model_ = 0;
  std::vector<float> hidden_;  // (B*T, d_model): the trunk's output, then its gradient
};

}  // namespace ms::rl
