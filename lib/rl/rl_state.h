// The state of an RL run (rl_run.h), shared by the loop (rl_run.cc) and its checkpoints
// (rl_checkpoint.cc). Internal to lib/rl.
#pragma once

#include <algorithm>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/communicator.h"
#include "infer/model_loader.h"
#include "io/directory_lock.h"
#include "model/transformer.h"
#include "rl/prompt_dataset.h"
#include "rl/rl_config.h"
#include "rl/rl_run.h"
#include "rl/async_rollouts.h"
#include "rl/critic.h"
#include "rl/rollout.h"
#include "rl/rollout_weights.h"
#include "rl/step_rollouts.h"
#include "telemetry/writer.h"
#include "train/distributed_optimizer.h"

namespace ms::rl {

// One trained model of the run as its checkpoint holds it (rl_checkpoint.cc): the actor (no
// prefix), or the critic ("critic.").
struct SavedModel {
  std::string prefix;
  std::vector<model::Parameter*> parameters;
  const std::vector<model::Parameter*>* trainable;  // in the optimizer's order
  train::DistributedOptimizer* optimizer;           // null before the optimizers exist
  const char* updates_key;  // the optimizer's update count in the manifest's state
};

struct RlRun::State {
  RlConfig config;
  // Every rank (each round's collectives, the run's files on its rank 0); the ranks that train
  // (world, unless placement.mode is split: then the first world - rollout_ranks), their
  // data-parallel group and, with parallel.tp > 1, their tensor-parallel group (tp groups are
  // runs of consecutive ranks; dp is then split across them). trainers and dp are null on a
  // rank that only generates.
  comm::Communicator* world = nullptr;
  comm::Communicator* trainers = nullptr;
  comm::Communicator* dp = nullptr;
  std::unique_ptr<comm::Communicator> trainer_group, tp_group, dp_group;
  // Split placement: the tp ranks of dp rank 0 (holding the actor's slices), then the rollout
  // ranks (receiving the whole weights); null on the other ranks and when colocated.
  std::unique_ptr<comm::Communicator> weights_group;
  // Split placement: the rollout ranks alone (generation's collectives; null on a trainer) and
  // the world rank of the first of them, which hands each step to the trainers.
  std::unique_ptr<comm::Communicator> rollout_group;
  int first_rollout_rank = 0;
  bool trains = true, generates = true;
  int gen_index = 0, gen_count = 1;  // this rank among the generating ranks (-1: none)
  std::function<void(const std::string&)> log;
  std::optional<io::DirectoryLock> lock;
  infer::LoadedModel reference;  // the checkpoint as loaded: the frozen reference for KL
  std::unique_ptr<model::Transformer> actor;
  // parallel.tp > 1 or split placement: the whole weights the engine generates with, gathered
  // from the actor's slices before the first generation after each step (stale marks a step
  // since; null on a rank that only trains); the gathers since the last step record, summed
  // (a step takes and clears them).
  std::unique_ptr<model::Transformer> rollout_model;
  bool rollout_stale = true;
  ReshardReport unreported_reshard;
  // Split placement's pipeline: step i generates with the weights after step version_for(i)
  // = max(0, i - 1 - k), k = rollout.async_staleness (0 when synchronous), so with k > 0 the
  // rollout ranks generate step i + 1 while the trainers update step i. The trainers keep the
  // older versions of their slices that later steps still need (the sends to the rollout
  // ranks, the evaluations at the end, a checkpoint), by step;
  // actor_version is the step the actor's own weights are after, sent_version the version the
  // rollout ranks last received (-1: none yet), on every rank.
  int64_t staleness = 0;
  WeightVersions held;
  int64_t actor_version = 0;
  int64_t sent_version = -1;
  std::unique_ptr<train::DistributedOptimizer> optimizer;
  // PPO and VAPO: the value model and its own optimizer over the same data-parallel group.
  std::unique_ptr<Critic> critic;
  std::unique_ptr<train::DistributedOptimizer> critic_optimizer;
  // The step after which value pretraining ended early (critic.warmup_until_explained_variance
  // reached; 0: it has not), the same on every trainer, saved in checkpoints.
  int64_t value_warmup_ended = 0;
  std::vector<PromptExample> prompts, eval_prompts;
  std::span<const PromptExample> eval_share;  // this rank's contiguous share of eval_prompts
  std::unique_ptr<RolloutGenerator> rollouts;
  std::unique_ptr<telemetry::TelemetryWriter> telemetry;
  std::ofstream steps_file, eval_file;
  // The prompt stream as of the last trained step (what a checkpoint saves); the synchronous
  // loop draws from it directly.
  PromptStream stream;
  std::unique_ptr<AsyncRollouts> async;  // with rollout.async_staleness >= 0
  // The older weight versions a resumed asynchronous run's checkpoint held, for AsyncRollouts.
  WeightVersions resumed_versions;
  int32_t pad = 0;
  // Checkpoints (rl_checkpoint.cc): the actor's trainable parameters in the optimizer's order,
  // what a save writes beside the tensors, and the checkpoint a resumed run started from.
  std::vector<model::Parameter*> trainable;
  std::vector<model::Parameter*> critic_trainable;  // in the critic optimizer's order
  std::string tokenizer_path, config_yaml;
  std::string resume_dir;
  int64_t start_step = 0;  // the step the run continues after (0: a fresh run)
  std::unique_ptr<ckpt::Checkpointer> checkpointer;

  // Sets world and the roles and groups above from config (rl_run.cc).
  Status form_groups(comm::Communicator& w);
  Status load();
  Status open_outputs();
  // True when generation runs on gathered whole weights (parallel.tp > 1 or split placement):
  // the same on every rank.
  bool reshards() const { return config.tp > 1 || config.rollout_ranks > 0; }
  // Colocated under tp, when a step ran since the last gather: gathers the actor's slices
  // into the rollout model within the tp group, adding the cost to unreported_reshard.
  // Collective over it.
  Status refresh_rollout_model();
  // Split placement.
  int64_t version_for(int64_t step) const {
    return std::max<int64_t>(0, step - 1 - staleness);
  }
  // Logs that a resumed asynchronous run lacks `versions` older weight versions it needs.
  void warn_substituted(int versions) const;
  // Runs fn with the actor holding weight version v (held, swapped in and back out, unless it
  // is the actor's own); Internal when v is not held.
  Status with_version(int64_t v, const std::function<Status()>& fn);
  // Sends weight version v from dp rank 0's tp ranks to the rollout ranks, which gather it
  // into their rollout model (the cost added to unreported_reshard). Collective over world's
  // weights_group members; every rank records sent_version.
  Status send_version(int64_t v);
  // The older weight versions a checkpoint after `step` keeps (those before it that the next
  // steps still need), by step, in the actor's parameter order: the asynchronous rollout
  // thread's or split placement's.
  std::vector<std::pair<int64_t, const std::vector<std::vector<float>>*>> versions_to_save(
      int64_t step);
  // Split placement: the rollout ranks take the run's position (start_step and the prompt
  // stream) from world rank 0, which restored it. Collective over world.
  Status share_position();
  // Finds the checkpoint to resume from (checkpoint.resume auto) and the model description and
  // tokenizer a save writes; loads the resumed actor's weights into `actor`.
  Status find_and_load_weights();
  // The actor, then the critic when there is one.
  std::vector<SavedModel> saved_models();
  // After the optimizer adopted the parameters: its moments and the run's position.
  Status restore_optimizer_and_position();
  // Drops the lines of rl_steps.jsonl / rl_eval.jsonl past start_step (written after the
  // checkpoint a resumed run starts from), atomically. Rank 0.
  Status trim_run_files() const;
  // Saves the actor, the moments and the position after `step`; collective.
  Status save_checkpoint(int64_t step);
};


}  // namespace ms::rl
