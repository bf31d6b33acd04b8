// The generation side of an RL step (rl_run.h): draw the round's prompts, generate this rank's
// share of the groups, score them, let dynamic sampling keep or drop groups (with more rounds)
// over the rewards gathered from every data-parallel rank, and evaluate the kept responses'
// log-probs under the weights that generated them (the behavior policy). The synchronous loop
// runs it on the actor itself; asynchronous rollouts (async_rollouts.h) on a copy of older
// weights in another thread. Both get the same result from the same weights and prompt stream.
#pragma once

#include <cstdint>
#include <random>
#include <string>
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
  // The whole position as text, for handing it to other ranks of the same run; decode gives
  // Internal when the text does not parse (a bug, not user input).
  std::string encode() const;
  static Result<PromptStream> decode(const std::string& text);
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
  std::vector<Rollout*> kept;
  std::vector<size_t> before;
  PolicyEval behavior;  // log-probs and entropies of the kept responses' tokens
  // The generation figures (rewards, accuracy, lengths, groups, rounds, drafting, entropy,
  // response tokens, rollout_s); the update fills in the rest.
  StepMetrics metrics;
  // The prompt stream after this step's draws, set by the rollout thread of asynchronous
  // rollouts (the synchronous loop draws from the run's own stream).
  PromptStream stream_after;
};

// What generates and where. `gen` is every generating rank (each round's collectives); the
// generating ranks among them take equal shares of each round's positions, by gen_index.
// `dp` is the training's data-parallel group: dp rank d trains the groups at positions
// [d P/dp, (d + 1) P/dp). A rank trains what it generated, unless `pool` gathers the groups of
// its generating members, which then cover positions [pool_first, ...):
//   - one rank, or data parallelism: every rank generates and trains its share; no pool;
//   - a tensor-parallel actor, colocated: every rank generates, and the tp group (its ranks
//     consecutive) pools its members' groups, which are its dp rank's share;
//   - split placement: `gen` is the rollout ranks alone, none of which trains (dp null on
//     every member); split_rollouts.h hands their step to the trainers.
// `generator` runs on whole weights; `policy` is the actor (tp slices) that takes the behavior
// log-probs of the groups this rank trains.
struct RolloutSide {
  const RlConfig& config;
  comm::Communicator& gen;
  comm::Communicator* dp;       // null on a rank that only generates
  comm::Communicator* pool;     // null: none
  size_t pool_first = 0;
  RolloutGenerator* generator;  // null on a rank that only trains
  model::Transformer* policy;   // null on a rank that only generates
  int gen_index = 0;            // this rank among the generating ranks (-1: none)
  int gen_count = 1;
  PromptStream& stream;
  int32_t pad = 0;
};

// Collective over side.gen (none with one rank). Errors of any rank (the engine, the reward
// program) reach every rank; dynamic sampling's bound error as fill_batch gives it.
Result<StepRollouts> generate_step_rollouts(RolloutSide& side, int64_t step,
                                            int64_t weight_version);

// Sets out.kept and out.before to the kept groups at positions [first, first + share) of the
// round (this rank's dp share), out.rounds[k][0] being the group at position `base`.
void keep_trained_share(StepRollouts& out, size_t first, size_t share, size_t base);

// The behavior log-probs and entropies of out.kept under `policy` (null: none on this rank),
// a failure agreed over `failures`; out.metrics' entropy and response tokens summed over
// `sharers` (the ranks whose kept rollouts together make the step's). Collective over both
// groups.
Status evaluate_behavior(StepRollouts& out, model::Transformer* policy,
                         comm::Communicator& failures, comm::Communicator& sharers, int32_t pad);

// Split placement: each kept rollout of out.kept takes its own tokens' slice of out.behavior
// (Rollout::behavior), to travel with it to the trainers; the reverse, collecting them into
// out.behavior in out.kept's order.
void attach_behavior(StepRollouts& out);
void collect_behavior(StepRollouts& out);

}  // namespace ms::rl
