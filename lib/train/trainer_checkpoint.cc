// The trainer's checkpoint plumbing (see trainer.h, "Checkpoints"): finding the checkpoint to
// resume from and restoring weights, optimizer moments and non-tensor state from it; saving the
// state every checkpoint.every steps and at the end; committing asynchronous saves at step
// boundaries. Members of Trainer, kept apart from the training loop in trainer.cc.
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "core/logging.h"
#include "core/timer.h"
#include "model/transformer.h"
#include "io/env.h"
#include "train/flat_layout.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "train/trainer_state.h"

namespace ms::train {

namespace {

std::string checkpoints_dir(const config::RunConfig& config) {
  return config.run.dir + "/checkpoints";
}

const char* const kMomentPrefixes[] = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};

// Resuming reads the data files as saving writes them: past the page cache unless
// checkpoint.direct_io is off.
ckpt::LoadOptions load_options(const config::RunConfig& config) {
  ckpt::LoadOptions options;
  options.direct_io = config.checkpoint.direct_io;
  return options;
}

}  // namespace

// checkpoint.resume: "none" starts fresh; "auto" resumes from the checkpoint run.dir/checkpoints/
// latest names, or from the newest complete one when `latest` is missing or broken (rank 0
// warns), and starts fresh when there is none; anything else is a checkpoint path that must
// load.
Status Trainer::find_resume_checkpoint() {
  const std::string& resume = config_.checkpoint.resume;
  if (resume == "none") return Status::OK();
  if (resume == "auto") {
    MS_ASSIGN_OR_RETURN(const ckpt::AutoResumeChoice choice,
                        ckpt::newest_complete_checkpoint(checkpoints_dir(config_),
                                                         io::default_env()));
    if (!choice.warning.empty() && world_.rank() == 0) {
      MS_LOG(Warn) << "checkpoint.resume auto: " << choice.warning;
    }
    if (choice.step_dir.empty()) return Status::OK();
    s_->resume_dir = choice.step_dir;
  } else {
    MS_ASSIGN_OR_RETURN(s_->resume_dir, ckpt::resolve_checkpoint(resume));
  }
  MS_ASSIGN_OR_RETURN(ckpt::Manifest manifest, ckpt::Manifest::read(s_->resume_dir));
  s_->resume_manifest = std::move(manifest);
  MS_LOG(Info) << "resuming from " << s_->resume_dir << " (step " << s_->resume_manifest->step
               << ", saved with dp " << s_->resume_manifest->layout.dp << ", tp "
               << s_->resume_manifest->layout.tp << ", pp " << s_->resume_manifest->layout.pp
               << ", zero "
               << s_->resume_manifest->layout.zero << ")";
  return Status::OK();
}

// The weights, before the distributed optimizer adopts them (so a ZeRO master copy starts from
// the loaded values). Every tensor of the whole model and its optimizer state must be there,
// and no other, whichever part of it this rank holds (a pipeline stage loads its own).
Status Trainer::load_parameters() {
  MS_ASSIGN_OR_RETURN(const std::vector<model::ParameterSpec> specs,
                      model::parameter_specs(config_.model));
  std::vector<ckpt::ExpectedTensor> expected;
  for (const model::ParameterSpec& spec : specs) {
    expected.push_back({spec.name, DType::kF32, spec.global_shape});
    if (!spec.trainable) continue;  // no optimizer state
    for (const char* prefix : kMomentPrefixes) {
      expected.push_back({prefix + spec.name, DType::kF32, spec.global_shape});
    }
  }
  std::vector<ckpt::LoadTensor> load;
  for (model::Parameter* p : all_parameters()) {
    load.push_back({p->name, DType::kF32, p->shard, p->value.raw_data()});
  }
  const ckpt::Manifest& m = *s_->resume_manifest;
  MS_RETURN_IF_ERROR(ckpt::check_tensors(m, expected, {}).with_context(s_->resume_dir));
  return ckpt::load_tensors(s_->resume_dir, m, load, load_options(config_), io::default_env());
}

// This rank's part of the optimizer moments (its ZeRO segments, or everything), then the
// non-tensor state.
Status Trainer::load_optimizer_state() {
  const std::vector<model::Parameter*> params = all_parameters();
  std::vector<ckpt::LoadTensor> load;
  // On a device the moments are read into host buffers and copied up: the reader writes
  // through host pointers.
  const bool on_device = !s_->device.is_host();
  std::vector<std::vector<float>> staged;
  std::vector<float*> device_targets;
  for (OptimizerSet::Part& part : s_->dist->parts()) {
    Optimizer& optimizer = part.optimizer->optimizer();
    for (const ShardSegment& segment : part.optimizer->owned_segments()) {
      const model::Parameter& p = *params[part.params[segment.param]];
      MS_ASSIGN_OR_RETURN(comm::ShardSpec spec, zero_shard_spec(p.shard, segment));
      float* moments[] = {optimizer.exp_avg().data(), optimizer.exp_avg_sq().data()};
      for (size_t i = 0; i < 2; ++i) {
        float* into = moments[i] + segment.shard_offset;
        if (on_device) {
          device_targets.push_back(into);
          into = staged.emplace_back(static_cast<size_t>(segment.length())).data();
        }
        load.push_back({kMomentPrefixes[i] + p.name, DType::kF32, spec, into});
      }
    }
  }
  MS_RETURN_IF_ERROR(
      ckpt::load_tensors(s_->resume_dir, *s_->resume_manifest, load, load_options(config_),
                         io::default_env()));
  DeviceRuntime& runtime = s_->backend->runtime();
  for (size_t k = 0; k < device_targets.size(); ++k) {
    const auto n = static_cast<int64_t>(staged[k].size());
    Tensor to = Tensor::view_of(DType::kF32, {n}, device_targets[k], s_->device);
    const Tensor from = Tensor::view_of(DType::kF32, {n}, staged[k].data());
    MS_RETURN_IF_ERROR(runtime.copy(to, from, s_->backend->stream()).with_context(load[k].name));
  }
  if (on_device) MS_RETURN_IF_ERROR(runtime.synchronize(s_->backend->stream()));
  return restore_state();
}

Status Trainer::restore_state() {
  const nlohmann::json& state = s_->resume_manifest->state;
  try {
    s_->start_step = state.at("step").get<int64_t>();
    for (OptimizerSet::Part& part : s_->dist->parts()) {
      part.optimizer->optimizer().set_updates(state.at("optimizer_updates").get<int64_t>());
    }
    const nlohmann::json& guard = state.at("spike_guard");
    // "consecutive" is newer than the format: a checkpoint without it resumes with none.
    s_->guard->restore({guard.at("losses").get<std::vector<double>>(),
                        guard.at("grad_norms").get<std::vector<double>>(),
                        guard.at("skipped").get<int64_t>(),
                        guard.value("consecutive", int64_t{0})});
    const nlohmann::json& loader = state.at("loader");
    MS_RETURN_IF_ERROR(s_->train_loader->restore(
        {loader.at("plan_hash").get<std::string>(), loader.at("consumed_samples").get<int64_t>()}));
  } catch (const nlohmann::json::exception& e) {
    return Corruption(s_->resume_dir + "/manifest.json: state: " + e.what());
  }
  s_->last_saved_step = s_->start_step;
  return Status::OK();
}

// The tensors this rank hands to a save: weights and its optimizer moments.
Status Trainer::checkpoint_tensors(std::vector<ckpt::SaveTensor>& tensors) {
  const std::vector<model::Parameter*> params = all_parameters();
  // Who writes what: a tensor every rank holds whole is deduplicated by the Checkpointer; a tp
  // slice is held alike by the ranks of a dp group, so dp rank 0 lists it; a ZeRO range is
  // the rank's own, but of a tensor replicated over tp only tp rank 0 lists it. With pipeline
  // parallelism a stage's whole tensors (norms, the router) are held by its ranks only, so
  // its (dp 0, tp 0) rank lists them as its own, and the last stage's copy of a tied
  // embedding is left to the first stage. A routed expert is held by its ep rank's
  // expert-data-parallel group: edp rank 0 (and tp rank 0 for a whole tensor) lists it.
  const comm::MeshCoord& coord = s_->mesh->coord();
  const bool pipeline = s_->pipeline.schedule.pp > 1;
  std::vector<bool> expert(params.size(), false);
  for (const OptimizerSet::Part& part : s_->dist->parts()) {
    for (size_t i : part.params) expert[i] = part.experts;
  }
  const auto lists_whole = [&](size_t i) {
    const model::Parameter& p = *params[i];
    if (is_tied_copy(p)) return false;
    if (expert[i]) return coord.edp == 0 && (!p.shard.is_replicated() || coord.tp == 0);
    // cp ranks hold the same tensors as their dp rank: (dp 0, cp 0) lists them.
    if (p.shard.is_replicated()) {
      return !pipeline || (coord.dp == 0 && coord.cp == 0 && coord.tp == 0);
    }
    return coord.dp == 0 && coord.cp == 0;
  };
  // Listed by one rank although its spec says whole: the Checkpointer must not deduplicate it.
  const auto exclusive = [&](size_t i) {
    return params[i]->shard.is_replicated() && (pipeline || expert[i]);
  };
  tensors.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    const model::Parameter* p = params[i];
    if (lists_whole(i) && p->shard.numel() > 0) {
      tensors.push_back({p->name, DType::kF32, p->shard, p->value.raw_data(), exclusive(i)});
    }
  }
  for (OptimizerSet::Part& part : s_->dist->parts()) {
    const DistributedOptimizer& dist = *part.optimizer;
    Optimizer& optimizer = part.optimizer->optimizer();
    for (const ShardSegment& segment : dist.owned_segments()) {
      const size_t i = part.params[segment.param];
      const model::Parameter& p = *params[i];
      if (is_tied_copy(p)) continue;
      if (dist.zero() ? p.shard.is_replicated() && coord.tp != 0 : !lists_whole(i)) continue;
      MS_ASSIGN_OR_RETURN(comm::ShardSpec spec, zero_shard_spec(p.shard, segment));
      const float* moments[] = {optimizer.exp_avg().data(), optimizer.exp_avg_sq().data()};
      const bool own = dist.zero() || exclusive(i);
      for (size_t m = 0; m < 2; ++m) {
        tensors.push_back({kMomentPrefixes[m] + p.name, DType::kF32, spec,
                           moments[m] + segment.shard_offset, own});
      }
    }
  }
  return Status::OK();
}

// Async saves: the staging buffer of the first save is allocated and faulted in before the
// first step, so that save stalls no more than later ones.
Status Trainer::reserve_checkpoint_staging() {
  if (!config_.checkpoint.async || config_.checkpoint.every <= 0) return Status::OK();
  if (!s_->checkpointer) s_->checkpointer = std::make_unique<ckpt::Checkpointer>(trainers());
  std::vector<ckpt::SaveTensor> tensors;
  MS_RETURN_IF_ERROR(checkpoint_tensors(tensors));
  const Stopwatch watch;
  MS_RETURN_IF_ERROR(
      s_->checkpointer->reserve_staging(tensors, ckpt::SaveRequest{}.max_shard_bytes));
  MS_LOG(Debug) << "checkpoint staging reserved in " << watch.elapsed_s() << " s";
  return Status::OK();
}

// Starts saving the state after `step` (weights, this rank's moments, non-tensor state). A
// failed save is logged on every rank and training continues.
Status Trainer::save_checkpoint(int64_t step) {
  if (!s_->checkpointer) s_->checkpointer = std::make_unique<ckpt::Checkpointer>(trainers());
  // Compressed weights: a skipped update or a stop between checkpoint steps leaves replicas
  // that are not the master weights; the checkpoint holds the master weights.
  if (config_.parallel.compress.weights != "none") {
    s_->checkpointer->before_overwrite_all();
    MS_RETURN_IF_ERROR(s_->dist->sync_replicas());
  }
  std::vector<ckpt::SaveTensor> tensors;
  MS_RETURN_IF_ERROR(checkpoint_tensors(tensors));
  const SpikeGuardState guard = s_->guard->state();
  const data::LoaderState loader = s_->train_loader->state();
  ckpt::SaveRequest request;
  request.checkpoints_dir = checkpoints_dir(config_);
  request.step = step;
  request.layout = {trainers().size(), s_->dp, s_->model->tp_size(),
                    s_->pipeline.schedule.pp, static_cast<int>(config_.parallel.ep),
                    static_cast<int>(config_.parallel.zero)};
  if (s_->checkpoint_config_yaml.empty()) s_->checkpoint_config_yaml = config::dump_yaml(config_);
  request.config_yaml = s_->checkpoint_config_yaml;
  request.state = {{"step", step},
                   {"optimizer_updates", s_->dist->main().optimizer().updates()},
                   {"lr", learning_rate(config_.optim, step, config_.train.steps)},
                   {"seed", config_.run.seed},
                   {"loader", {{"plan_hash", loader.plan_hash},
                               {"consumed_samples", loader.consumed_samples}}},
                   {"spike_guard", {{"losses", guard.losses},
                                    {"grad_norms", guard.grad_norms},
                                    {"skipped", guard.skipped},
                                    {"consecutive", guard.consecutive}}}};
  request.tokenizer_path = s_->train_loader->tokenizer_path();
  request.async = config_.checkpoint.async;
  // The writer copies the state while the next step runs; update() calls before_overwrite_all()
  // before the optimizer changes it, so the save still holds this step's state.
  request.copy_on_write = config_.checkpoint.async;
  if (!s_->device.is_host()) {
    // The weights and moments are device memory: staged through the backend's runtime at save.
    request.source = &s_->backend->runtime();
    request.source_stream = s_->backend->stream();
  }
  request.max_write_mbps = config_.checkpoint.max_write_mbps;
  request.direct_io = config_.checkpoint.direct_io;
  request.keep = config_.checkpoint.keep;
  s_->last_saved_step = step;
  Status saved = s_->checkpointer->save(tensors, std::move(request));
  if (!saved.ok()) {
    ++s_->summary.checkpoint_failures;
    MS_LOG(Error) << "checkpoint at step " << step << " failed, training continues: "
                  << saved.message();
  } else if (!config_.checkpoint.async) {
    s_->summary.checkpoints.push_back(s_->checkpointer->last_report()->step_dir);
  }
  return Status::OK();
}

// Commits an asynchronous save whose writes finished on every rank, and takes the outcome of
// one save (this poll's, or one a save() resolved while making room for itself). Collective.
Status Trainer::poll_checkpoint() {
  ckpt::Checkpointer* checkpointer = s_->checkpointer.get();
  if (!checkpointer || (!checkpointer->in_flight() && !checkpointer->has_outcome())) {
    return Status::OK();
  }
  (void)record_checkpoint_outcome(checkpointer->poll());
  return Status::OK();
}

// Counts a failed save (logged on every rank; training continues) or lists a committed one.
// Returns the save's error, OK otherwise.
Status Trainer::record_checkpoint_outcome(const Result<std::optional<ckpt::SaveReport>>& outcome) {
  if (!outcome.ok()) {
    ++s_->summary.checkpoint_failures;
    MS_LOG(Error) << "checkpoint save failed, training continues: " << outcome.status().message();
    return outcome.status();
  }
  if (*outcome) s_->summary.checkpoints.push_back((*outcome)->step_dir);
  return Status::OK();
}

// At the end of the run (last step or stop signal): saves the final state unless it was just
// saved, and waits for every save to commit. The run fails when the newest save failed: the
// final one, or the last periodic one when the final state was already saved.
Status Trainer::finish_checkpoints(TrainSummary& summary) {
  MS_RETURN_IF_ERROR(poll_checkpoint());
  const int64_t failures_before = summary.checkpoint_failures;
  if (summary.steps_done > s_->last_saved_step && summary.steps_done > 0) {
    MS_RETURN_IF_ERROR(save_checkpoint(summary.steps_done));
  }
  if (!s_->checkpointer) return Status::OK();
  const bool final_save_started = failures_before == summary.checkpoint_failures;
  // finish() waits for both saves that may be in flight and hands back one outcome; the rest
  // come from poll(), which communicates no more once nothing is in flight. Outcomes come
  // oldest first, so the last is the newest save's.
  Status newest = record_checkpoint_outcome(s_->checkpointer->finish());
  while (!s_->checkpointer->in_flight() && s_->checkpointer->has_outcome()) {
    newest = record_checkpoint_outcome(s_->checkpointer->poll());
  }
  if (!newest.ok()) return newest;
  if (!final_save_started) return IOError("the final checkpoint was not saved (see the log)");
  return Status::OK();
}

}  // namespace ms::train
