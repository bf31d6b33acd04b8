// Rollouts: G sampled responses per prompt from ms-infer's engine (infer::Engine, continuous
// batching over the paged KV cache) running on the actor's own model::Transformer, so every
// generation sees the weights of the latest update without a copy (the hybrid engine), and
// their rewards: the built-in checks (rewards.h) or a user reward program
// (reward_program.h), plus DAPO's overlong penalty when configured. With
// rollout.speculative_tokens the engine verifies drafts from earlier rollouts of the same
// prompt (rollout_drafter.h), which every sample_groups call extends.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"
#include "infer/engine.h"
#include "rl/actor.h"
#include "rl/prompt_dataset.h"
#include "rl/rl_config.h"
#include "rl/rollout_drafter.h"

namespace ms::rl {

struct Rollout {
  size_t prompt_index = 0;
  Sample sample;     // prompt and response tokens
  std::string text;  // the response decoded
  double reward = 0.0;
  bool correct = false;  // the reference answer matched (accuracy), whatever the reward
  bool flawed = false;   // a positive the step checker found a flawed step in (FAPO)
  bool truncated = false;  // stopped by max_tokens
  // Its response tokens' log-probs and entropies under the weights that generated it, when the
  // generating rank took them (split placement's rollout ranks, for the kept groups); empty
  // otherwise.
  PolicyEval behavior;
};

using RolloutGroup = std::vector<Rollout>;

class RolloutGenerator {
 public:
  // `model`, `tokenizer` and `prompts` must outlive the generator.
  static Result<std::unique_ptr<RolloutGenerator>> create(model::Transformer& model,
                                                          const data::Tokenizer& tokenizer,
                                                          const RlConfig& config,
                                                          const std::vector<PromptExample>& prompts);

  // One group of config.group_size sampled responses for each prompt index, scored. `seed`
  // and each group's position in the step's round (first_position + its index here) key the
  // sampling: the same seed, positions and weights give the same responses, so a round split
  // over data-parallel ranks generates what one rank generating all of it would.
  Result<std::vector<RolloutGroup>> sample_groups(std::span<const size_t> prompt_indices,
                                                  uint64_t seed, size_t first_position = 0);

  // How many of `examples` (held-out prompts) the greedy (temperature 0) response answers
  // exactly.
  Result<int64_t> greedy_correct(std::span<const PromptExample> examples);

  // The engine's figures for the last sample_groups or greedy_correct call.
  const infer::EngineStats& engine_stats() const { return engine_->stats(); }

 private:
  RolloutGenerator(const data::Tokenizer& tokenizer, const RlConfig& config,
                   const std::vector<PromptExample>& prompts)
      : tokenizer_(tokenizer), config_(config), prompts_(prompts) {}
  // The rewards of `rollouts`, marking the flawed positives where a step checker is set.
  Result<std::vector<double>> rewards(std::vector<Rollout>& rollouts,
                                      const std::vector<const PromptExample*>& examples);

  const data::Tokenizer& tokenizer_;
  const RlConfig& config_;
  const std::vector<PromptExample>& prompts_;
  std::vector<std::vector<int32_t>> prompt_tokens_;
  std::unique_ptr<RolloutDrafter> drafter_;  // with rollout.speculative_tokens > 0
  std::unique_ptr<infer::Engine> engine_;
};

}  // namespace ms::rl
