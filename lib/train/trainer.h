// Trainer: the loop behind `ms-train`. One process per rank, world = pp x dp x tp trainer
// ranks (comm/mesh.h) plus any loader ranks. Each step every rank reads its micro-batches from
// the plan's loader, runs forward and backward on each (gradient accumulation), while the
// DistributedOptimizer reduces gradient buckets over the dp group as backward produces them;
// then the ranks agree on the step's loss, the global gradient norm, whether the spike guard
// skips the update, and apply it (AdamW or LAMB, plain or ZeRO-1). Every step is logged (rank
// 0), recorded in the per-rank telemetry and traced; the validation loss is evaluated every
// train.eval_every steps.
//
// Pipeline parallelism (parallel.pp > 1): each rank holds parallel.vpp model chunks and runs
// the step's micro-batches through them in its schedule's order (train/pipeline_step.h); the
// gradients are reduced over dp once the pipeline has drained, and the gradient norm sums
// over the stages.
//
// Loader ranks (parallel.loaders = K): the last K world ranks hold no model; create() only
// checks the config and joins the Mesh there, and run() serves the trainers' micro-batches
// (lib/data/disaggregated.h) until every trainer's Trainer is destroyed, which releases its
// loader rank. Trainers take their batches from the loader ranks and run their collectives
// over the model group; the losses are bitwise those of local loading on the same trainers.
//
// Stopping: SIGINT/SIGTERM on any rank (a loader rank's reaches the trainers in its replies)
// sets a flag; at each step boundary the ranks take the maximum of their flags, so all stop
// after the same step and return normally. A non-finite loss or gradient norm stops the run
// with an error naming the step and the rank.
//
// Checkpoints (lib/ckpt): every checkpoint.every steps and when the run ends (last step or
// stop signal) the weights, optimizer moments and all state that influences later steps
// (step, optimizer update count, loader position, spike-guard window) are saved to
// run.dir/checkpoints, asynchronously when checkpoint.async (committed at a later step
// boundary). A failed save is logged and training continues. checkpoint.resume ("auto": the
// newest complete checkpoint in run.dir/checkpoints, "none", or a path) restores all of it
// in create(), resharding when the data-parallel size or ZeRO setting changed.
//
// Errors: everything create() refuses (config against world size and data, missing plan,
// unreadable files on any rank) is agreed between the ranks first (comm::agree), so every rank
// returns the same error, carrying the failing rank's message, and none is left waiting in a
// collective. run() returns the same error on every rank for a non-finite loss or gradient
// norm and a failed final checkpoint; other failures inside the loop are local to one rank,
// and the caller ends the job (cli::run_in_world does: docs/comm.md, "Failure agreement").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "comm/communicator.h"
#include "config/run_config.h"
#include "core/status.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "ops/backend.h"
#include "parallel/comm_stats.h"
#include "train/distributed_optimizer.h"

namespace ms::ckpt {
struct SaveTensor;
struct SaveReport;
}  // namespace ms::ckpt

namespace ms::train {

struct TrainSummary {
  int64_t steps_done = 0;
  bool stopped_by_signal = false;
  std::vector<double> losses;       // the global mean training loss of every step, in order
  std::vector<double> eval_losses;  // every validation loss, in order
  int64_t skipped_updates = 0;      // updates the spike guard skipped
  parallel::CommStats comm;         // gradient reductions summed over all steps
  parallel::CommStats tp_comm;      // tensor-parallel collectives summed over all steps
  parallel::CompressedTraffic dp_compressed;  // compressed dp bytes this rank sent, all steps
  int64_t first_step = 1;           // 1, or the step after the checkpoint resumed from
  std::vector<std::string> checkpoints;  // step directories committed by this run, in order
  int64_t checkpoint_failures = 0;  // saves that failed (logged; training went on)
  int64_t dropped_tokens = 0;  // MoE assignments model.moe.capacity_factor dropped, all steps
  double data_wait_s = 0;  // this rank's time waiting for micro-batches (the data_s phases)
  double step_time_s = 0;  // this rank's time in its training steps
  // Steps that ran while an asynchronous save was writing, and the others (the run's first
  // step, a warm-up, in neither), with their summed times: the slowdown a save causes.
  int64_t steps_while_saving = 0, steps_not_saving = 0;
  double time_while_saving_s = 0, time_not_saving_s = 0;
};

class Trainer {
 public:
  // Validates `config` against the world size (its dp becomes world.size()) and the data,
  // opens the loaders, locks run.dir against a second job and sets it up (rank 0), builds the
  // model and the distributed optimizer, and measures the sgemm rate when
  // train.mfu_peak_gflops is 0. Collective over
  // `world`, which must outlive the trainer and be used by this thread only. Every rank
  // returns an error when any rank fails.
  static Result<std::unique_ptr<Trainer>> create(config::RunConfig config,
                                                 comm::Communicator& world);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains train.steps steps, or until a stop signal. Collective.
  Result<TrainSummary> run();

  const config::RunConfig& config() const { return config_; }

 private:
  struct State;
  Trainer(config::RunConfig config, comm::Communicator& world);

  // The ranks that train: the world without the loader ranks (the world before the Mesh).
  comm::Communicator& trainers() const;
  // The ranks that split each step's tokens and average their gradients: dp, or dp x cp under
  // context parallelism (each cp rank holds its chunks of every sequence).
  comm::Communicator& replicas() const;
  // A whole-sequence micro-batch -> this rank's cp chunks of it (unchanged without cp).
  data::MicroBatch local_tokens(data::MicroBatch batch) const;
  Status build();
  // comm.simulate_link: wraps the world for the mesh; with compression, finds the nodes too.
  Status simulate_link();
  void set_compression(DistributedOptimizerOptions& options) const;
  Result<std::unique_ptr<data::BatchSource>> open_source(const data::LoaderOptions& options);
  Status serve_data(TrainSummary& summary);
  void stop_loaders();
  Status check_config();
  Status lock_run_dir();
  Status open_data();
  // train.device: its backend (the host, or the registered CUDA one), refused by name when
  // missing.
  Status open_device();
  // train.precision as the backend's matmul precision.
  ops::MatmulPrecision matmul_precision() const {
    return config_.train.precision == config::Precision::kBf16 ? ops::MatmulPrecision::kBf16
                                                               : ops::MatmulPrecision::kF32;
  }
  Status build_model();
  Status start_watchdog();
  Status build_pipeline();
  std::vector<model::Parameter*> all_parameters() const;
  bool is_tied_copy(const model::Parameter& p) const;
  void log_model_size() const;
  // Logs (rank 0) what one model rank holds: weights, gradients and optimizer state of its
  // tp slice (the state divided over dp under ZeRO-1), the expected peak activations and, at
  // bf16, the backend's operand copies.
  void log_memory_plan() const;
  Status open_telemetry();
  Status measure_yardsticks();
  struct StepResult;
  Result<StepResult> train_step(int64_t step);
  Status accumulate_gradients(int64_t step, StepResult& result);
  Status run_micro_batch(int64_t step, int micro_index, StepResult& result);
  Status run_pipeline(int64_t step, StepResult& result);
  Status reduce_loss(int64_t step, StepResult& result);
  Status reduce_moe_load(StepResult& result);
  Status update(int64_t step, StepResult& result);
  Result<double> evaluate();
  Result<bool> agree_to_stop();
  void log_step(int64_t step, const StepResult& result) const;
  Status record_step(int64_t step, const StepResult& result);
  Status finish(TrainSummary& summary);
  void log_compression(const TrainSummary& summary) const;
  Status log_data_wait(const TrainSummary& summary);
  Status find_resume_checkpoint();
  Status load_parameters();
  Status load_optimizer_state();
  Status restore_state();
  Status checkpoint_tensors(std::vector<ckpt::SaveTensor>& tensors);
  Status reserve_checkpoint_staging();
  Status save_checkpoint(int64_t step);
  Status poll_checkpoint();
  Status record_checkpoint_outcome(const Result<std::optional<ckpt::SaveReport>>& outcome);
  Status finish_checkpoints(TrainSummary& summary);

  config::RunConfig config_;
  comm::Communicator& world_;
  std::unique_ptr<State> s_;
};

}  // namespace ms::train
