// The generation side of an RL step (rl_run.h): draw the round's prompts, generate this rank's
// share of the groups, score them, let dynamic sampling keep or drop groups (with more rounds)
// over the rewards gathered from every data-parallel rank, and evaluate the kept responses'
// log-probs under the weights that generated them (the behavior policy). The synchronous loop
// runs it on the actor itself; asynchronous rollouts (async_rollouts.h) on a copy of older
// weights in another thread. Both get the same result from the same weights and prompt stream.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/transformer.h"
#include "rl/actor.h"
#include "rl/dynamic_sampling.h"
#include "rl/rl_config.h"
#include "rl/rl_run.h"
#include "rl/rollout.h"

namespace ms::rl {

// The training prompts' order: shuffled by run.seed, reshuffled after each pass.
struct PromptStream {
  std::vector<size_t> order;
  size_t cursor = 0;
  std::mt19937_64 rng;

  static PromptStream shuffled(size_t prompts, uint64_t seed);
  std::vector<size_t> next(int64_t n);
};

struct StepRollouts {
  int64_t step = 0;
  // The weights the rollouts were generated with: those after this many steps.
  int64_t weight_version = 0;
  // The groups this rank trains (its dp rank's share), per generation round.
  std::vector<std::vector<RolloutGroup>> rounds;
  FilledBatch batch;                              // the kept groups, over every rank
  // This rank's kept rollouts (pointing into `rounds`, whose buffers a move keeps), in the
  // batch's order; before[k]: how many of this rank's kept groups precede the batch's k-th.
  std::vector<const Rollout*> kept;
  std::vector<size_t> before;
  PolicyEval behavior;  // log-probs and entropies of the kept responses' tokens
  // The generation figures (rewards, accuracy, lengths, groups, rounds, drafting, entropy,
  // response tokens, rollout_s); the update fills in the rest.
  StepMetrics metrics;
  // The prompt stream after this step's draws, set by the rollout thread of asynchronous
  // rollouts (the synchronous loop draws from the run's own stream).
  PromptStream stream_after;
};

// What generates and where. `gen` is every generating rank, `dp` the training's data-parallel
// group and `tp` (null: none) its tensor-parallel group: with a tensor-parallel actor every
// rank generates (tp = 1 x dp = gen.size()) and the members of a tp group pool their groups,
// so dp rank d trains the groups of gen ranks d tp .. (d + 1) tp - 1 (tp groups are runs of
// consecutive ranks). Without tp, gen is dp. `generator` runs on the whole weights; `policy`
// is the actor (its tp slices) that takes the behavior log-probs.
struct RolloutSide {
  const RlConfig& config;
  comm::Communicator& gen;
  comm::Communicator& dp;
  comm::Communicator* tp;
  RolloutGenerator& generator;
  model::Transformer& policy;
  PromptStream& stream;
  int32_t pad = 0;
};

// Collective over side.gen (none with one rank). Errors of any rank (the engine, the reward
// program) reach every rank; dynamic sampling's bound error as fill_batch gives it.
Result<StepRollouts> generate_step_rollouts(RolloutSide& side, int64_t step,
                                            int64_t weight_version);

}  // namespace ms::rl
