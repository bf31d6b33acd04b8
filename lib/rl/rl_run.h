// The RL post-training loop behind `ms-train rl` (docs/rl.md), over data-parallel and
// tensor-parallel ranks on the CPU. Each step: sample prompts, generate G responses each with the engine on the actor's own
// weights (rollout.h), score them, drop all-equal groups and generate again under dynamic
// sampling, compute group-normalised advantages, take the rollout policy's log-probs, then for
// each epoch and mini-batch evaluate the current policy, form the clipped loss (plus k3 KL to
// the frozen initial actor when kl_coef > 0) and apply one optimizer update through the
// trainer's DistributedOptimizer. The optimizer's flat buffers hold the model's parameters, so the next
// rollout generates from the updated weights with no copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "rl/actor.h"
#include "rl/aggregation.h"
#include "rl/response_layout.h"
#include "rl/rl_config.h"

namespace ms::rl {

struct StepRollouts;

struct StepMetrics {
  int64_t step = 0;
  double mean_reward = 0, accuracy = 0, response_length = 0, entropy = 0;
  double clip_fraction = 0, dual_clip_fraction = 0, policy_kl = 0, ref_kl = 0;
  double loss = 0, grad_norm = 0, lr = 0;
  int64_t kept_groups = 0, dropped_groups = 0, rounds = 0, response_tokens = 0, updates = 0;
  int64_t flawed_positives = 0;  // responses the step checker flagged (FAPO), all ranks
  // Generation: tokens each rollout gained per actor forward after its prefill (1 without
  // speculative rollouts), and the share of drafted tokens the actor accepted.
  double tokens_per_forward = 0, draft_acceptance = 0;
  // The weights the rollouts came from: those after this many steps (step - 1 when
  // synchronous; older with asynchronous rollouts).
  int64_t weight_version = 0;
  double rollout_s = 0, update_s = 0;
  // Split placement: how long the trainers waited for the step's rollouts from the rollout
  // ranks (the hand-off, transfer included): what asynchronous rollouts hide (waited true).
  bool waited = false;
  double rollout_wait_s = 0;
  // parallel.tp > 1 (resharded true): the in-memory gathers of the whole weights since the
  // previous step's record (for this step's rollouts, or an evaluation's before them): the most
  // bytes any rank received and the longest any took.
  bool resharded = false;
  int64_t reshard_bytes = 0;
  double reshard_s = 0;
  // PPO and VAPO: the critic's value loss, value-clip fraction and gradient norm (means over
  // its updates), the mean value at rollout time and the mean return over response tokens,
  // the share of the returns' variance those values explain (0 when the returns do not
  // vary), and the critic's updates (the actor's `updates` are 0 in value pretraining steps).
  double value_loss = 0, value_clip_fraction = 0, critic_grad_norm = 0;
  double value_mean = 0, return_mean = 0, explained_variance = 0;
  int64_t critic_updates = 0;
};

// One JSON object per line of <run.dir>/rl_steps.jsonl (docs/rl.md lists the keys).
std::string step_metrics_json(const StepMetrics& m);

class RlRun {
 public:
  // Loads the actor, the prompts, the optimizer and the engine on every rank of `world`, split
  // into tp groups of parallel.tp consecutive ranks and the data-parallel groups across them
  // (parallel.tp must divide the ranks, and rollout.prompts_per_step be a multiple of them:
  // every rank generates). `log` receives rank 0's progress lines. Collective: a failure on
  // one rank is every rank's error.
  static Result<std::unique_ptr<RlRun>> create(const RlConfig& config, comm::Communicator& world,
                                               std::function<void(const std::string&)> log);
  ~RlRun();

  // Runs every step, writing (rank 0) <run.dir>/rl_steps.jsonl and <run.dir>/rl_eval.jsonl with
  // the held-out greedy accuracy before, every eval_every steps and after, and each rank's step
  // records in <run.dir>/telemetry/ (as ms-train's). Returns the last step's metrics, the same
  // on every rank.
  Result<StepMetrics> run();

 private:
  struct State;
  explicit RlRun(std::unique_ptr<State> state);
  Result<StepMetrics> step(int64_t step);
  // Split placement's step: the rollout ranks generate it among themselves with the weights
  // after step version_for(step), take the kept responses' behavior log-probs under those
  // weights and hand it all to the trainers (rollout_exchange.h), then receive the weights
  // the next step generates with; the trainers take the step, send those weights as soon as
  // they hold them (before their update when rollout.async_staleness k > 0, so the rollout
  // ranks generate the next step during it; after it when k = 0), and update.
  Result<StepMetrics> split_step(int64_t step);
  // Split placement: the rollout ranks receive weight version `version` (once), then evaluate
  // it when it is an evaluation point after the run's start.
  Status publish(int64_t version);
  // Whether the held-out evaluation runs after `step` (before the last; the last always).
  bool evaluates_after(int64_t step) const;
  Result<StepMetrics> update(const StepRollouts& rollouts);
  // The per-token signal of this rank's kept rollouts (layout order): the policy's advantages
  // and, with a critic, the values at rollout time and the returns it is trained towards.
  struct TokenTargets {
    std::vector<double> advantages, old_values, returns;
  };
  Result<TokenTargets> token_targets(const StepRollouts& rollouts, const ResponseLayout& layout,
                                     std::span<const Sample* const> samples, bool value_warmup);
  // One mini-batch of whole groups: this rank's samples [r0, r1) of the step's kept ones and
  // their tokens [t0, t1); the global counts and the loss weights' scope.
  struct MiniBatch {
    size_t r0 = 0, r1 = 0, t0 = 0, t1 = 0;
    std::span<const Sample* const> samples;
    double tokens = 0;            // response tokens over every rank
    int64_t positive_tokens = 0;  // of positively rewarded responses, over every rank
    AggregationScope scope;
  };
  Status update_actor(const StepRollouts& rollouts, const MiniBatch& batch,
                      const TokenTargets& targets, const PolicyEval& reference, StepMetrics& m);
  Status update_critic(int64_t step, const MiniBatch& batch, const TokenTargets& targets,
                       StepMetrics& m);
  Status evaluate(int64_t step);
  std::unique_ptr<State> s_;
};

}  // namespace ms::rl
