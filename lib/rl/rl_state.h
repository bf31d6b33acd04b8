// The state of an RL run (rl_run.h), shared by the loop (rl_run.cc) and its checkpoints
// (rl_checkpoint.cc). Internal to lib/rl.
#pragma once

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
  // Every rank (generation, agreement on errors, checkpoints, the run's files on its rank 0),
  // the training's data-parallel group and, with parallel.tp > 1, its tensor-parallel group
  // (tp groups are runs of consecutive ranks; dp is then the world split across them).
  comm::Communicator* world = nullptr;
  comm::Communicator* dp = nullptr;
  std::unique_ptr<comm::Communicator> tp_group, dp_group;
  std::function<void(const std::string&)> log;
  std::optional<io::DirectoryLock> lock;
  infer::LoadedModel reference;  // the checkpoint as loaded: the frozen reference for KL
  std::unique_ptr<model::Transformer> actor;
  // parallel.tp > 1: the whole weights the engine generates with, gathered from the actor's
  // slices before the first generation after each update (stale marks an update since); the
  // gathers since the last step record, summed (a step takes and clears them).
  std::unique_ptr<model::Transformer> rollout_model;
  bool rollout_stale = true;
  ReshardReport unreported_reshard;
  std::unique_ptr<train::DistributedOptimizer> optimizer;
  // PPO and VAPO: the value model and its own optimizer over the same data-parallel group.
  std::unique_ptr<Critic> critic;
  std::unique_ptr<train::DistributedOptimizer> critic_optimizer;
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

  Status load();
  Status open_outputs();
  // parallel.tp > 1: gathers the actor's slices into rollout_model when an update changed
  // them, adding the cost to unreported_reshard. Collective over tp.
  Status refresh_rollout_model();
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
