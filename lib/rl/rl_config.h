// The RL run's configuration: `ms-train rl --config rl.yaml` reads its own file rather than an
// `rl:` section of the training config, because almost nothing of a pretraining run applies
// (the model comes from the actor's checkpoint, the data is a prompt file, the step is a
// rollout) and the two sets of keys would otherwise have to exclude each other. Every key and
// its default is in docs/rl.md; unknown keys are errors naming the key, so a typo never falls
// back to a default silently.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "rl/aggregation.h"
#include "rl/losses.h"

namespace ms::rl {

// GRPO and DAPO take one advantage per response from its group; PPO and VAPO train a critic
// (critic.h) and take per-token advantages from GAE.
enum class Algorithm { kGrpo, kDapo, kPpo, kVapo };

// True for the algorithms with a value model.
inline bool has_critic(Algorithm a) { return a == Algorithm::kPpo || a == Algorithm::kVapo; }

struct RlConfig {
  // run
  std::string run_dir;
  uint64_t seed = 1;
  // actor: exactly one of checkpoint (ms-train's) or model_dir (Hugging Face layout)
  std::string checkpoint;
  std::string model_dir;
  // prompts
  std::string train_prompts;
  std::string eval_prompts;  // optional held-out file: greedy accuracy at start, every
                             // eval_every steps and at the end
  // When set, train_prompts (eval_prompts) is an ms-data dataset prefix of the prompts and this
  // the prefix of their answers (prompt_dataset.h); otherwise a JSON-lines file.
  std::string train_answers;
  std::string eval_answers;
  int64_t eval_every = 0;    // 0: only at start and end
  int64_t eval_limit = 0;    // 0: every held-out prompt
  // rollout
  int64_t group_size = 8;        // G responses per prompt
  int64_t prompts_per_step = 8;  // groups per step (after dynamic sampling's filtering)
  int64_t max_tokens = 32;       // response length bound (DAPO's max_len for overlong shaping)
  double temperature = 1.0;
  double top_p = 1.0;
  std::vector<std::string> stop;  // stop strings; the response keeps the token that made one
  // Speculative rollouts (rollout_drafter.h): up to this many tokens drafted from earlier
  // rollouts of the same prompt and the prompt itself, verified by the actor; 0: off.
  int64_t speculative_tokens = 0;
  // Asynchronous rollouts: generation on weights at most this many steps older than the
  // previous step's, in its own thread on one rank (async_rollouts.h) or on split placement's
  // rollout ranks (RlRun::split_step); -1: synchronous (the hybrid engine).
  int64_t async_staleness = -1;
  // algorithm
  Algorithm algorithm = Algorithm::kGrpo;
  LossAggregation loss_agg = LossAggregation::kSeqMeanTokenMean;
  PolicyClip clip{0.2, 0.2, 3.0};
  double kl_coef = 0.0;  // k3 KL to the frozen initial actor; 0: no reference model
  double epsilon = 1e-6;
  bool dynamic_sampling = false;
  int64_t max_rounds = 4;           // dynamic sampling's bound on generation rounds per step
  int64_t overlong_cache_len = 0;   // 0: no overlong shaping
  // PPO and VAPO (advantage.h): GAE's discount and, for PPO, its lambda (verl's defaults 1.0 and
  // 1.0); VAPO's policy lambda is length-adaptive with lambda_alpha (0.05) and its critic's
  // lambda 1.0. positive_nll_coef: VAPO's language-model loss on positive responses (0.1; 0
  // for PPO).
  double gamma = 1.0;
  double lambda = 1.0;
  double lambda_alpha = 0.05;
  double positive_nll_coef = 0.0;
  // The critic (PPO and VAPO): its learning rate (0: twice optimizer.lr, VAPO's 1e-6 / 2e-6;
  // the rest of its optimizer is optimizer's), the value clip (verl's cliprange_value 0.5), and
  // the value pretraining steps at the start of the run: the critic trains on Monte-Carlo
  // returns of the initial policy's rollouts while the actor stays fixed (VAPO: 50).
  // VAPO pretrains "until value loss and explained variance are sufficiently low": with
  // warmup_until_explained_variance e the value pretraining ends early, after the first step
  // whose explained variance (the critic's values at rollout time against the returns) is at
  // least e; warmup_steps stays the bound. Infinity (the default): always warmup_steps.
  double critic_lr = 0.0;
  double value_clip = 0.5;
  int64_t critic_warmup_steps = 0;
  double critic_warmup_until_ev = std::numeric_limits<double>::infinity();
  // parallel: the actor's (and the critic's) tensor-parallel size for training. The training
  // ranks are split into tp groups of consecutive ranks and data-parallel groups across them;
  // generation runs at tp = 1, on whole weights gathered in memory after each step
  // (rollout_weights.h).
  int64_t tp = 1;
  // placement: colocated (every rank trains and generates; rollout_ranks 0) or split: the last
  // rollout_ranks ranks only generate, on whole weights the trainers send them after each
  // update, and the others only train (HybridFlow's split placement).
  int64_t rollout_ranks = 0;
  // update
  int64_t steps = 10;
  int64_t mini_batches = 1;  // updates per step: the step's responses split into this many
  int64_t epochs = 1;        // passes over the step's responses
  // name, lr, betas, eps, weight_decay, grad_clip, and the schedule over RL steps (schedule,
  // warmup_steps, min_lr: train/schedule.h; constant by default)
  config::OptimConfig optimizer;
  // checkpoint: the actor, its optimizer moments and the run's position, in ms-train's format
  // under <run.dir>/checkpoints (servable by ms-infer --checkpoint)
  int64_t checkpoint_every = 0;  // also every N steps; 0: only after the last step
  int64_t checkpoint_keep = 0;   // keep the newest N; 0: all
  std::string resume = "auto";   // auto: continue from the newest checkpoint of run.dir; none
  // reward
  std::string reward_builtin = "exact_number";  // exact_number | format
  std::string reward_program;                   // command; replaces the built-in reward
  double reward_timeout_s = 60.0;
  int reward_processes = 1;
  // FAPO: a command that checks the steps of positively rewarded responses (reward_program.h,
  // flawed_positives); a flawed one loses flawed_penalty of its reward (verl's default 1: a
  // correct answer scored +1 against -1 for a wrong one becomes 0). Run with the reward
  // program's timeout and processes.
  std::string step_checker;
  double flawed_penalty = 1.0;
};

std::string_view algorithm_name(Algorithm a);

// The critic's optimizer: `optimizer`'s settings and schedule at critic_lr.
config::OptimConfig critic_optimizer(const RlConfig& c);

// Parses YAML text; `source` names it in errors. Algorithm defaults (GRPO: seq-mean-token-mean,
// clip 0.2/0.2; DAPO: token-mean, clip 0.2/0.28, dynamic sampling, overlong shaping with
// cache_len max_tokens / 4; PPO: token-mean; VAPO: token-mean, clip 0.2/0.28, positive NLL
// 0.1, 50 value pretraining steps) apply first and explicit keys override them. InvalidArgument naming
// the key for unknown keys, wrong types and values out of range.
Result<RlConfig> parse_rl_config(const std::string& yaml, const std::string& source);
Result<RlConfig> load_rl_config(const std::string& path);

}  // namespace ms::rl
