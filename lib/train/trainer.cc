// The training loop: the run over steps, one step (gradients over the micro-batches or through
// the pipeline, the loss and MoE load reductions, the update) and its log line and telemetry;
// see trainer.h for what a step does and how ranks agree. The start-up wiring is in
// trainer_setup.cc, evaluation in trainer_eval.cc, the end-of-run reports in trainer_report.cc
// and the checkpoint plumbing (resume, save, commit) in trainer_checkpoint.cc.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "comm/mesh.h"
#include "core/logging.h"
#include "core/timer.h"
#include "data/disaggregated.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "parallel/cp_layout.h"
#include "telemetry/writer.h"
#include "train/grad_clip.h"
#include "train/rank_sum.h"
#include "train/schedule.h"
#include "train/spike_guard.h"
#include "train/stop_signal.h"
#include "train/trainer_state.h"

namespace ms::train {
namespace {

double seconds_between(double t0, double t1) { return std::max(0.0, t1 - t0); }

}  // namespace

struct Trainer::StepResult {
  double loss = 0;      // global mean over the step's tokens
  double aux_loss = 0;  // MoE load-balancing loss, global mean
  double local_loss = 0;
  double local_aux = 0;
  double z_loss = 0;  // MoE router z-loss, global mean
  double local_z = 0;
  double grad_norm = 0;
  double lr = 0;
  double step_s = 0;
  bool skipped = false;
  telemetry::StepPhases phases;
  // MoE: per model layer, the step's assignments per expert over every dp rank, and the
  // assignments the capacity dropped (empty for a dense model).
  std::vector<std::vector<int64_t>> expert_tokens;
  std::vector<int64_t> dropped_tokens;
  std::vector<std::vector<int64_t>> expert_chosen;  // like expert_tokens, before any drop
};

Trainer::Trainer(config::RunConfig config, comm::Communicator& world)
    : config_(std::move(config)), world_(world), s_(std::make_unique<State>()) {}

// A trainer rank that goes away (normally or on an error) releases its loader rank, so loader
// ranks never outlive the training.
Trainer::~Trainer() {
  stop_loaders();
  if (s_->watchdog) world_.set_watchdog(nullptr);
}

comm::Communicator& Trainer::trainers() const {
  return s_->mesh && s_->loaders > 0 ? s_->mesh->model() : world_;
}

comm::Communicator& Trainer::replicas() const {
  return config_.parallel.cp > 1 ? s_->mesh->dp_cp() : s_->mesh->dp();
}

data::MicroBatch Trainer::local_tokens(data::MicroBatch batch) const {
  const int cp = static_cast<int>(config_.parallel.cp);
  if (cp == 1) return batch;
  const int rank = s_->mesh->coord().cp;
  const int64_t local = batch.seq_len / cp;
  std::vector<int32_t> inputs(static_cast<size_t>(batch.rows * local));
  std::vector<int32_t> targets(inputs.size());
  parallel::cp_take(batch.inputs.data(), batch.rows, batch.seq_len, cp, rank, inputs.data());
  parallel::cp_take(batch.targets.data(), batch.rows, batch.seq_len, cp, rank, targets.data());
  batch.inputs = std::move(inputs);
  batch.targets = std::move(targets);
  batch.seq_len = local;
  return batch;
}

Result<TrainSummary> Trainer::run() {
  // On a loader rank too: a signal must not end a loader before its trainers have stopped.
  install_stop_handlers();
  TrainSummary& summary = s_->summary;
  if (s_->loader_rank) {
    MS_RETURN_IF_ERROR(serve_data(summary));
    return summary;
  }
  summary.first_step = s_->start_step + 1;
  summary.steps_done = s_->start_step;
  MS_RETURN_IF_ERROR(reserve_checkpoint_staging());
  for (int64_t step = s_->start_step + 1; step <= config_.train.steps; ++step) {
    MS_ASSIGN_OR_RETURN(const bool stop, agree_to_stop());
    if (stop) {
      summary.stopped_by_signal = true;
      MS_LOG(Info) << "stop signal received: stopping after step " << step - 1;
      break;
    }
    MS_RETURN_IF_ERROR(poll_checkpoint());
    const bool saving = s_->checkpointer && s_->checkpointer->in_flight();
    MS_ASSIGN_OR_RETURN(const StepResult result, train_step(step));
    if (step > summary.first_step) {
      (saving ? summary.steps_while_saving : summary.steps_not_saving) += 1;
      (saving ? summary.time_while_saving_s : summary.time_not_saving_s) += result.step_s;
    }
    summary.losses.push_back(result.loss);
    summary.steps_done = step;
    summary.comm.add(s_->dist->step_stats());
    summary.dp_compressed.add(s_->dist->take_compressed_traffic());
    for (const auto& chunk : s_->chunks) {
      summary.tp_comm.add(chunk->take_tp_comm_stats());
      s_->ep_stats.add(chunk->take_ep_comm_stats());
      s_->cp_stats.add(chunk->take_cp_comm_stats());
      s_->attention_s += chunk->take_attention_seconds();
    }
    for (int64_t d : result.dropped_tokens) summary.dropped_tokens += d;
    summary.data_wait_s += result.phases.data_s;
    summary.step_time_s += result.step_s;
    MS_RETURN_IF_ERROR(record_step(step, result));
    const bool last = step == config_.train.steps;
    if (s_->eval_loader && (step % config_.train.eval_every == 0 || last)) {
      MS_ASSIGN_OR_RETURN(const double eval_loss, evaluate());
      // Evaluation's tp collectives, ring transfers and routing are not a step's.
      for (const auto& chunk : s_->chunks) {
        chunk->take_tp_comm_stats();
        chunk->take_cp_comm_stats();
        chunk->take_attention_seconds();
        chunk->take_moe_load();
      }
      summary.eval_losses.push_back(eval_loss);
      MS_LOG(Info) << "eval step " << step << " | val_loss " << eval_loss;
    }
    if (config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0) {
      MS_RETURN_IF_ERROR(save_checkpoint(step));
    }
  }
  MS_RETURN_IF_ERROR(finish_checkpoints(summary));
  MS_RETURN_IF_ERROR(finish(summary));
  return summary;
}

Result<bool> Trainer::agree_to_stop() {
  int32_t flag = stop_requested() ? 1 : 0;
  if (flag != 0) MS_LOG(Warn) << "received signal " << stop_signal() << "; asking all ranks to stop";
  // A signal to a loader rank reaches the trainers through its replies.
  if (flag == 0 && s_->train_client && s_->train_client->loader_stop_requested()) {
    MS_LOG(Warn) << "loader rank " << s_->train_client->server_rank()
                 << " received a stop signal; asking all ranks to stop";
    flag = 1;
  }
  MS_RETURN_IF_ERROR(trainers().allreduce(&flag, &flag, 1, DType::kI32, comm::ReduceOp::kMax));
  return flag != 0;
}

Result<Trainer::StepResult> Trainer::train_step(int64_t step) {
  Stopwatch watch;
  StepResult result;
  s_->faults->at_step_start(step);
  // A checkpoint step goes in full precision: what is saved is what every replica holds.
  const bool saved = (config_.checkpoint.every > 0 && step % config_.checkpoint.every == 0) ||
                     step == config_.train.steps;
  s_->dist->begin_step(step, saved);
  MS_RETURN_IF_ERROR(accumulate_gradients(step, result));
  {
    ScopedTimer wait(result.phases.comm_wait_s);
    MS_RETURN_IF_ERROR(s_->dist->finish_reduction());
  }
  MS_RETURN_IF_ERROR(reduce_loss(step, result));
  MS_RETURN_IF_ERROR(reduce_moe_load(result));
  {
    ScopedTimer optim(result.phases.optim_s);
    MS_RETURN_IF_ERROR(update(step, result));
  }
  result.step_s = watch.elapsed_s();
  return result;
}

Status Trainer::accumulate_gradients(int64_t step, StepResult& result) {
  if (s_->pipeline_step) return run_pipeline(step, result);
  for (int mb = 0; mb < s_->micro_batches; ++mb) {
    MS_RETURN_IF_ERROR(run_micro_batch(step, mb, result));
  }
  result.local_loss /= s_->micro_batches;
  result.local_aux /= s_->micro_batches;
  result.local_z /= s_->micro_batches;
  return Status::OK();
}

// The step's micro-batches through this rank's pipeline stages (pipeline_step.h). Every pp
// rank reads the same micro-batches (its dp rank's); the gradients are reduced over dp after
// the pipeline drained, since the tied embedding's copies must be summed first.
Status Trainer::run_pipeline(int64_t step, StepResult& result) {
  std::vector<data::MicroBatch> batches;
  {
    ScopedTimer data_time(result.phases.data_s);
    for (int mb = 0; mb < s_->micro_batches; ++mb) {
      MS_ASSIGN_OR_RETURN(data::MicroBatch batch, s_->train_loader->next());
      batches.push_back(local_tokens(std::move(batch)));
    }
  }
  s_->pipeline_step->set_forward_delay(s_->faults->slow_ms(step) / 1e3 / s_->micro_batches);
  MS_ASSIGN_OR_RETURN(const PipelineStepResult r, s_->pipeline_step->run(step, batches));
  result.local_loss = r.loss;
  result.local_aux = r.aux;
  result.local_z = r.z;
  result.phases.fwd_s += r.fwd_s;
  result.phases.bwd_s += r.bwd_s;
  result.phases.comm_wait_s += r.p2p.recv_wait_s;
  s_->pp_stats.messages_sent += r.p2p.messages_sent;
  s_->pp_stats.bytes_sent += r.p2p.bytes_sent;
  s_->pp_stats.recv_wait_s += r.p2p.recv_wait_s;
  return Status::OK();
}

// One micro-batch's forward and backward. The first gradient hook marks where backward
// starts, which splits the call into the fwd and bwd phases of the trace.
Status Trainer::run_micro_batch(int64_t step, int micro_index, StepResult& result) {
  std::optional<data::MicroBatch> batch;
  {
    ScopedTimer data_time(result.phases.data_s);
    MS_ASSIGN_OR_RETURN(data::MicroBatch whole, s_->train_loader->next());
    batch = local_tokens(std::move(whole));
  }
  if (micro_index == s_->micro_batches - 1) s_->dist->arm();
  double backward_t0 = 0;
  model::BackwardHooks hooks;
  hooks.on_grad_ready = [&](size_t param) {
    if (backward_t0 == 0) backward_t0 = wall_time_s();
    s_->dist->on_grad_ready(param);
  };
  hooks.poll = [this] { s_->dist->poll(); };
  const double t0 = wall_time_s();
  if (micro_index == 0) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(s_->faults->slow_ms(step)));
  }
  MS_ASSIGN_OR_RETURN(const model::LossStats stats,
                      s_->model->forward_backward(batch->inputs.data(), batch->targets.data(),
                                                  batch->rows, batch->seq_len,
                                                  1.0f / static_cast<float>(s_->micro_batches),
                                                  &hooks));
  if (!s_->device.is_host()) {
    // A device's backward is enqueued when forward_backward returns: wait for it, so the
    // phases and the trace's bwd span time the kernels, not their launches (the forward's
    // end is already timed by the loss it read back).
    MS_RETURN_IF_ERROR(s_->backend->runtime().synchronize(s_->backend->stream()));
  }
  const double t1 = wall_time_s();
  const double split = backward_t0 > 0 ? backward_t0 : t1;
  result.phases.fwd_s += seconds_between(t0, split);
  result.phases.bwd_s += seconds_between(split, t1);
  if (s_->trace) {
    s_->trace->compute("fwd", 0, micro_index, step, t0, split);
    s_->trace->compute("bwd", 0, micro_index, step, split, t1);
  }
  result.local_loss += stats.loss;
  result.local_aux += stats.aux_loss;
  result.local_z += stats.z_loss;
  return Status::OK();
}

// The step's global loss, summed in rank order so every rank holds the same bits; a rank whose
// loss is not finite stops every rank with the same error, naming that rank.
Status Trainer::reduce_loss(int64_t step, StepResult& result) {
  comm::Communicator& dp = replicas();
  if (s_->faults->poison_loss(step)) {
    MS_LOG(Warn) << "debug.nan_rank: slot " << s_->faults->slot() << " poisons its loss at step "
                 << step;
    result.local_loss = std::nan("");
  }
  std::vector<double> values(3 + static_cast<size_t>(dp.size()), 0.0);
  values[0] = result.local_loss;
  values[1] = result.local_aux;
  values[2] = result.local_z;
  values[3 + static_cast<size_t>(dp.rank())] = std::isfinite(result.local_loss) ? 0.0 : 1.0;
  MS_RETURN_IF_ERROR(sum_in_rank_order(dp, values));
  for (int r = 0; r < dp.size(); ++r) {
    if (values[3 + static_cast<size_t>(r)] == 0.0) continue;
    return OutOfRange("the training loss is not finite at step " + std::to_string(step) +
                      " on rank " + std::to_string(dp.world_ranks()[static_cast<size_t>(r)]) +
                      " (dp rank " + std::to_string(r) +
                      "); lower optim.lr, tighten optim.grad_clip or check the data");
  }
  result.loss = values[0] / dp.size();
  result.aux_loss = values[1] / dp.size();
  result.z_loss = values[2] / dp.size();
  return Status::OK();
}

// The step's MoE routing over the whole job: every chunk's layers at their model index, summed
// over dp and the pipeline stages (tp ranks route alike, so not over tp). Collective.
Status Trainer::reduce_moe_load(StepResult& result) {
  const config::MoeConfig& moe = config_.model.moe;
  if (moe.num_experts == 0) return Status::OK();
  const size_t L = static_cast<size_t>(config_.model.n_layers);
  const size_t E = static_cast<size_t>(moe.num_experts);
  // [routed: L x E][dropped: L][chosen: L x E]
  std::vector<int64_t> flat(2 * L * E + L, 0);
  const size_t chosen_at = L * E + L;
  for (const auto& chunk : s_->chunks) {
    const model::Transformer::MoeLoad load = chunk->take_moe_load();
    const size_t first = static_cast<size_t>(chunk->chunk().first_layer);
    for (size_t l = 0; l < load.routed.size(); ++l) {
      for (size_t e = 0; e < load.routed[l].size() && e < E; ++e) {
        flat[(first + l) * E + e] += load.routed[l][e];
      }
      flat[L * E + first + l] += load.dropped[l];
    }
    for (size_t l = 0; l < load.chosen.size(); ++l) {
      for (size_t e = 0; e < load.chosen[l].size() && e < E; ++e) {
        flat[chosen_at + (first + l) * E + e] += load.chosen[l][e];
      }
    }
  }
  MS_RETURN_IF_ERROR(replicas().allreduce(flat.data(), flat.data(), flat.size(), DType::kI64,
                                              comm::ReduceOp::kSum));
  if (s_->pipeline.schedule.pp > 1) {
    MS_RETURN_IF_ERROR(s_->mesh->pp().allreduce(flat.data(), flat.data(), flat.size(),
                                                DType::kI64, comm::ReduceOp::kSum));
  }
  result.expert_tokens.assign(L, std::vector<int64_t>(E));
  for (size_t l = 0; l < L; ++l) {
    std::copy(flat.begin() + static_cast<std::ptrdiff_t>(l * E),
              flat.begin() + static_cast<std::ptrdiff_t>((l + 1) * E),
              result.expert_tokens[l].begin());
  }
  result.dropped_tokens.assign(flat.begin() + static_cast<std::ptrdiff_t>(L * E),
                               flat.begin() + static_cast<std::ptrdiff_t>(chosen_at));
  result.expert_chosen.assign(L, std::vector<int64_t>(E));
  for (size_t l = 0; l < L; ++l) {
    const auto from = flat.begin() + static_cast<std::ptrdiff_t>(chosen_at + l * E);
    std::copy(from, from + static_cast<std::ptrdiff_t>(E), result.expert_chosen[l].begin());
  }
  return Status::OK();
}

// Gradient norm, spike guard and the optimizer update (skipped on a spike).
Status Trainer::update(int64_t step, StepResult& result) {
  MS_ASSIGN_OR_RETURN(result.grad_norm, s_->dist->grad_norm());
  if (!std::isfinite(result.grad_norm)) {
    return OutOfRange("the gradient norm is not finite at step " + std::to_string(step) +
                      " (every rank sees it); lower optim.lr or check the data");
  }
  result.lr = learning_rate(config_.optim, step, config_.train.steps);
  const SpikeVerdict verdict = s_->guard->check(result.loss, result.grad_norm);
  if (verdict.skip) {
    result.skipped = true;
    s_->guard->record_skip();
    ++s_->summary.skipped_updates;
    MS_LOG(Warn) << "step " << step << ": skipping the update: "
                 << verdict.describe(config_.optim.spike_guard.window);
    return Status::OK();
  }
  if (verdict.gave_way) {
    MS_LOG(Warn) << "step " << step << ": applying the update although "
                 << verdict.describe(config_.optim.spike_guard.window) << ": after "
                 << SpikeGuard::kMaxConsecutiveSkips
                 << " skipped updates in a row the guard takes this as a new level";
  }
  // A copy-on-write checkpoint must hold the last saved step's weights, moments and routing
  // bias: whatever of them its writer has not copied yet is copied before they change.
  if (s_->checkpointer) s_->checkpointer->before_overwrite_all();
  MS_RETURN_IF_ERROR(
      s_->dist->apply(result.lr, clip_coefficient(result.grad_norm, config_.optim.grad_clip)));
  s_->guard->accept(result.loss, result.grad_norm);
  // Auxiliary-loss-free balancing: the routing bias follows the step's load, which every rank
  // holding a layer has summed alike (reduce_moe_load), so its copies stay bitwise equal.
  if (config_.model.moe.expert_bias) {
    for (const auto& chunk : s_->chunks) {
      chunk->update_expert_bias(result.expert_chosen, config_.model.moe.bias_update_rate);
    }
  }
  return Status::OK();
}

void Trainer::log_step(int64_t step, const StepResult& r) const {
  const double tokens = static_cast<double>(config_.train.global_batch * config_.train.seq_len);
  const double tokens_per_s = tokens / r.step_s;
  const double mfu = tokens_per_s * s_->flops_per_token / s_->peak_flops * 100.0;
  char line[320];
  int n = std::snprintf(line, sizeof(line),
                        "step %lld/%lld | loss %.4f | lr %.1e | grad_norm %.2f | tok/s %.0f | "
                        "mfu %.1f%% | step %.2fs",
                        static_cast<long long>(step), static_cast<long long>(config_.train.steps),
                        r.loss, r.lr, r.grad_norm, tokens_per_s, mfu, r.step_s);
  if (config_.model.moe.num_experts > 0 && n > 0 && n < static_cast<int>(sizeof(line))) {
    n += std::snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " | aux_loss %.4f",
                       r.aux_loss);
  }
  if (config_.model.moe.z_loss_coef > 0 && n > 0 && n < static_cast<int>(sizeof(line))) {
    n += std::snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " | z_loss %.4f",
                       r.z_loss);
  }
  if (config_.model.moe.capacity_factor > 0 && n > 0 && n < static_cast<int>(sizeof(line))) {
    int64_t dropped = 0;
    for (int64_t d : r.dropped_tokens) dropped += d;
    n += std::snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " | dropped %lld",
                       static_cast<long long>(dropped));
  }
  if (r.skipped && n > 0 && n < static_cast<int>(sizeof(line))) {
    std::snprintf(line + n, sizeof(line) - static_cast<size_t>(n), " | update skipped (spike)");
  }
  MS_LOG(Info) << line;
}

Status Trainer::record_step(int64_t step, const StepResult& r) {
  if (step % config_.train.log_every == 0 || step == config_.train.steps || r.skipped) {
    log_step(step, r);
  }
  telemetry::StepRecord record;
  record.step = step;
  record.loss = r.loss;
  record.grad_norm = r.grad_norm;
  record.lr = r.lr;
  record.step_s = r.step_s;
  record.tokens_per_s =
      static_cast<double>(config_.train.global_batch / s_->dp * config_.train.seq_len) / r.step_s;
  record.phases = r.phases;
  record.expert_tokens = r.expert_tokens;  // global (dp and pp summed): the same on every rank
  record.dropped_tokens = r.dropped_tokens;
  MS_RETURN_IF_ERROR(s_->telemetry->write_step(record));
  return s_->trace ? s_->trace->flush() : Status::OK();
}

}  // namespace ms::train
