// The training loop; see trainer.h for what a step does and how ranks agree. The checkpoint
// plumbing (resume, save, commit) is in trainer_checkpoint.cc.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "comm/agree.h"
#include "comm/clock_offset.h"
#include "comm/mesh.h"
#include "core/host_metrics.h"
#include "core/logging.h"
#include "core/timer.h"
#include "data/disaggregated.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "ops/sgemm_rate.h"
#include "parallel/cp_layout.h"
#include "telemetry/writer.h"
#include "train/document_mask.h"
#include "train/grad_clip.h"
#include "train/layout_report.h"
#include "train/rank_sum.h"
#include "train/run_checks.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/spike_guard.h"
#include "train/stop_signal.h"
#include "train/tp_batch_source.h"
#include "train/trainer_state.h"

namespace ms::train {
namespace {

double seconds_between(double t0, double t1) { return std::max(0.0, t1 - t0); }

// The name a group's collectives carry in the trace, where events pair up by (group, seq):
// the axis ("dp", "tp", "pp") when one group spans every trainer, else the axis and the
// group's lowest world rank ("dp.2"), so the dp groups of different stages stay apart
// (ms-diagnose reads the kind up to the '.').
std::string trace_group_name(const comm::Communicator& group, int trainers) {
  if (group.size() == trainers) return group.name();
  return group.name() + "." + std::to_string(group.world_ranks().front());
}

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

Result<std::unique_ptr<Trainer>> Trainer::create(config::RunConfig config,
                                                 comm::Communicator& world) {
  std::unique_ptr<Trainer> trainer(new Trainer(std::move(config), world));
  MS_RETURN_IF_ERROR(trainer->build());
  return trainer;
}

// Refuses bad input before anything is computed, then builds the pieces. Each stage that can
// fail on some ranks only ends in comm::agree(), before the next collective.
Status Trainer::build() {
  MS_RETURN_IF_ERROR(comm::agree(world_, check_config(), "checking the config"));
  MS_RETURN_IF_ERROR(comm::agree(world_, start_watchdog(), "starting the watchdog"));
  const comm::MeshShape shape{.pp = static_cast<int>(config_.parallel.pp),
                              .dp = s_->dp,
                              .tp = static_cast<int>(config_.parallel.tp),
                              .ep = static_cast<int>(config_.parallel.ep),
                              .loaders = s_->loaders,
                              .cp = static_cast<int>(config_.parallel.cp)};
  MS_ASSIGN_OR_RETURN(comm::Mesh mesh, comm::Mesh::create(world_, shape));
  s_->mesh.emplace(std::move(mesh));
  // A loader rank holds no model; run() serves the trainers' batches. From here on the
  // trainers' collectives go over trainers(), which the loader ranks are not part of.
  if (s_->mesh->is_loader()) {
    s_->loader_rank = true;
    return Status::OK();
  }
  s_->loaders_serving = s_->loaders > 0;
  Status local = open_data();
  if (local.ok()) local = lock_run_dir();
  if (local.ok() && world_.rank() == 0) {
    local = prepare_run_dir(config_, s_->train_loader->tokenizer_path());
  }
  if (local.ok()) local = find_resume_checkpoint();
  if (local.ok()) local = build_model();
  if (local.ok()) local = open_telemetry();
  MS_RETURN_IF_ERROR(comm::agree(trainers(), local, "starting up"));
  MS_RETURN_IF_ERROR(measure_yardsticks());
  return build_pipeline();
}

// Rank 0 holds the run directory's lock for the trainer's lifetime, taken right before the
// directory is first written (so bad input still leaves nothing behind); the other ranks of
// the job share it, and learn of a refusal from the start-up agreement.
Status Trainer::lock_run_dir() {
  if (world_.rank() != 0) return Status::OK();
  MS_ASSIGN_OR_RETURN(io::DirectoryLock lock, lock_run_directory(config_.run.dir));
  s_->run_dir_lock.emplace(std::move(lock));
  return Status::OK();
}

// The fault injector for this rank's slot, and the watchdog every communicator split from
// world_ inherits (so it must be set before the mesh is made).
Status Trainer::start_watchdog() {
  MS_ASSIGN_OR_RETURN(const int64_t slot, FaultInjector::slot_of(world_.rank()));
  s_->faults.emplace(config_.debug, slot, config_.run.dir);
  if (config_.telemetry.watchdog_s <= 0) return Status::OK();
  MS_ASSIGN_OR_RETURN(s_->watchdog, comm::Watchdog::start({.timeout_s = config_.telemetry.watchdog_s,
                                                           .dir = config_.run.dir}));
  world_.set_watchdog(s_->watchdog);
  return Status::OK();
}

// The pipeline step's executor over this rank's chunks (with parallel.pp > 1).
Status Trainer::build_pipeline() {
  const parallel::PpScheduleShape& shape = s_->pipeline.schedule;
  if (shape.pp == 1) return Status::OK();
  std::vector<model::Transformer*> chunks;
  for (const auto& chunk : s_->chunks) chunks.push_back(chunk.get());
  MS_ASSIGN_OR_RETURN(s_->pipeline_step,
                      PipelineStep::create(s_->mesh->pp(), shape, std::move(chunks),
                                           s_->trace.get(),
                                           trace_group_name(s_->mesh->pp(), trainers().size())));
  if (world_.rank() == 0) {
    Result<double> bubble = parallel::pp_theoretical_bubble(shape);
    char line[240];
    std::snprintf(line, sizeof(line),
                  "pipeline: pp %d, vpp %d, schedule %s, %d micro-batches per step; theoretical "
                  "bubble %.1f%%",
                  shape.pp, shape.vpp, std::string(parallel::pp_schedule_name(shape.kind)).c_str(),
                  shape.micro_batches, bubble.ok() ? *bubble * 100.0 : 0.0);
    MS_LOG(Info) << line;
  }
  return Status::OK();
}

// The checks that need no data: layout against the world size, the plan path, the model.
Status Trainer::check_config() {
  MS_ASSIGN_OR_RETURN(s_->dp, data_parallel_size(config_, world_.size()));
  s_->loaders = static_cast<int>(config_.parallel.loaders);
  if (s_->dp != config_.parallel.dp) {
    MS_LOG(Info) << "parallel.dp is " << config_.parallel.dp << " in the config; running with dp "
                 << s_->dp << " (the trainer ranks / (parallel.pp * parallel.tp))";
    config_.parallel.dp = s_->dp;
  }
  MS_ASSIGN_OR_RETURN(s_->pipeline, check_pipeline(config_, s_->dp));
  MS_RETURN_IF_ERROR(check_plan_path(config_));
  return model::validate_model_config(config_.model);
}

Status Trainer::open_data() {
  comm::Communicator& dp = s_->mesh->dp();
  data::LoaderOptions options{config_.data.plan, data::Split::kTrain, config_.train.global_batch,
                              config_.train.micro_batch, dp.rank(), dp.size(), 2};
  MS_ASSIGN_OR_RETURN(s_->train_loader, open_source(options));
  const auto* shared = dynamic_cast<const TpBroadcastSource*>(s_->train_loader.get());
  s_->train_client = dynamic_cast<const data::DisaggregatedLoaderClient*>(
      shared != nullptr ? shared->root_source() : s_->train_loader.get());
  const DataFacts facts{config_.data.plan, s_->train_loader->seq_len(),
                        s_->train_loader->vocab_size()};
  MS_RETURN_IF_ERROR(check_against_data(config_, facts));
  s_->micro_batches = s_->train_loader->micro_batches_per_step();
  if (config_.train.eval_every > 0) {
    options.split = data::Split::kValidation;
    options.prefetch = 0;
    MS_ASSIGN_OR_RETURN(s_->eval_loader, open_source(options));
  }
  if (s_->loaders > 0 && world_.rank() == 0) {
    if (config_.parallel.tp > 1) {
      MS_LOG(Info) << "data: " << s_->loaders << " loader rank(s) serve " << s_->dp
                   << " tp group(s) of " << config_.parallel.tp
                   << " trainer ranks (parallel.loaders); tp rank 0 of each tp group fetches "
                      "and broadcasts its batches";
    } else {
      MS_LOG(Info) << "data: " << s_->loaders << " loader rank(s) serve " << s_->dp
                   << " trainer rank(s) (parallel.loaders)";
    }
  }
  return Status::OK();
}

// A local Loader, or with parallel.loaders a client of this rank's loader rank, which opens the
// same Loader there (so the batches are bitwise those of local loading). The loader rank builds
// two steps of the train split ahead, so a trainer only waits for the transfer when the
// loaders keep up. Under tensor parallelism only tp rank 0 of each group holds the client and
// broadcasts the batches over the group (TpBroadcastSource): one fetch per tp group.
Result<std::unique_ptr<data::BatchSource>> Trainer::open_source(const data::LoaderOptions& options) {
  if (s_->loaders == 0) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<data::Loader> loader, data::Loader::open(options));
    return std::unique_ptr<data::BatchSource>(std::move(loader));
  }
  data::LoaderOptions remote = options;
  if (remote.prefetch > 0) {
    const int64_t per_step = options.global_batch / (int64_t{options.dp_size} * options.micro_batch);
    remote.prefetch = static_cast<int>(std::max<int64_t>(options.prefetch, 2 * per_step));
  }
  const bool shared = s_->mesh->layout().shape().tp > 1;
  std::unique_ptr<data::BatchSource> client;
  if (!shared || s_->mesh->coord().tp == 0) {
    // Outside a tp group's broadcast an open error stays on this rank; agree() shares it.
    Result<std::unique_ptr<data::DisaggregatedLoaderClient>> opened =
        data::DisaggregatedLoaderClient::open(world_, s_->loaders, remote);
    if (!shared) {
      MS_ASSIGN_OR_RETURN(std::unique_ptr<data::DisaggregatedLoaderClient> c, std::move(opened));
      return std::unique_ptr<data::BatchSource>(std::move(c));
    }
    // Every rank of the group must reach the broadcast below, so tp rank 0's failure is
    // agreed over the group first.
    MS_RETURN_IF_ERROR(comm::agree(s_->mesh->tp(), opened.status(), "opening the loader channel"));
    client = std::move(*opened);
  } else {
    MS_RETURN_IF_ERROR(comm::agree(s_->mesh->tp(), Status::OK(), "opening the loader channel"));
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<TpBroadcastSource> source,
                      TpBroadcastSource::create(s_->mesh->tp(), std::move(client)));
  return std::unique_ptr<data::BatchSource>(std::move(source));
}

// A loader rank's part of the job: serve its trainers until each of them has finished.
Status Trainer::serve_data(TrainSummary& summary) {
  summary.steps_done = 0;
  return data::run_loader_server(world_, s_->loaders, [] { return stop_requested(); });
}

// Closes this trainer's loader channels and tells its loader rank that it is done. Errors are
// logged: this runs in the destructor, also after a failure.
void Trainer::stop_loaders() {
  if (!s_->loaders_serving) return;
  s_->loaders_serving = false;
  s_->train_client = nullptr;
  s_->train_loader.reset();
  s_->eval_loader.reset();
  const Status finished = data::finish_disaggregated_loading(world_, s_->loaders);
  if (!finished.ok()) MS_LOG(Error) << "releasing the loader rank: " << finished.to_string();
}

// This rank's model chunks: the whole model, or with pipeline parallelism the virtual stages
// chunk * pp + pp rank (check_pipeline's layers).
Status Trainer::build_model() {
  model::ModelParallel parallel{&s_->mesh->tp(), config_.parallel.sequence_parallel,
                                config_.parallel.recompute,
                                config_.parallel.tp_overlap
                                    ? static_cast<int>(config_.parallel.tp_overlap_chunks)
                                    : 1,
                                {}, {},
                                config_.parallel.ep > 1 ? &s_->mesh->ep() : nullptr,
                                config_.parallel.ep_comm_dtype == "bf16",
                                static_cast<int>(config_.parallel.ep_overlap_chunks),
                                config_.parallel.cp > 1 ? &s_->mesh->cp() : nullptr,
                                config_.parallel.expert_tp};
  const std::string tp_group = trace_group_name(s_->mesh->tp(), trainers().size());
  parallel.on_comm = [this, tp_group](const char* op, uint64_t bytes, double t0, double t1) {
    if (s_->trace) s_->trace->comm(op, tp_group, s_->tp_comm_seq++, bytes, t0, t1);
  };
  const parallel::PpScheduleShape& shape = s_->pipeline.schedule;
  const int stages = shape.pp * shape.vpp;
  MS_ASSIGN_OR_RETURN(const model::DocumentMask documents, training_document_mask(config_));
  for (int c = 0; c < shape.vpp; ++c) {
    const int stage = c * shape.pp + s_->mesh->coord().pp;
    const parallel::StageLayers& layers = s_->pipeline.stages[static_cast<size_t>(stage)];
    parallel.chunk = {layers.first, layers.count, stage == 0, stage == stages - 1};
    MS_ASSIGN_OR_RETURN(std::unique_ptr<model::Transformer> chunk,
                        model::Transformer::create(config_.model,
                                                   static_cast<uint64_t>(config_.run.seed),
                                                   parallel));
    MS_RETURN_IF_ERROR(chunk->set_document_mask(documents));
    s_->chunks.push_back(std::move(chunk));
  }
  s_->model = s_->chunks.front().get();
  s_->flops_per_token = s_->model->flops_per_token(config_.train.seq_len);
  log_model_size();
  log_memory_plan();
  if (s_->resume_manifest) MS_RETURN_IF_ERROR(load_parameters());
  std::vector<TrainableParam> params;
  std::vector<ParamGroup> groups;
  for (const auto& chunk : s_->chunks) {
    for (size_t i = 0; i < chunk->parameters().size(); ++i) {
      model::Parameter& p = chunk->parameters()[i];
      params.push_back({p.name, &p.value, &p.grad, p.weight_decay, p.shard.is_replicated(),
                        !is_tied_copy(p)});
      groups.push_back(!p.trainable                                ? ParamGroup::kNotTrained
                       : chunk->routed_expert(i).has_value() ? ParamGroup::kExpert
                                                             : ParamGroup::kDense);
    }
  }
  DistributedOptimizerOptions options;
  options.zero = config_.parallel.zero == 1;
  options.overlap = config_.train.overlap_grad_reduce;
  options.bucket_bytes = static_cast<int64_t>(config_.train.bucket_mb * 1024 * 1024);
  const std::string dp_group = trace_group_name(replicas(), trainers().size());
  // A one-rank dp group beside other ranks (a pipeline stage, a tp group) is left out of the
  // trace: its collectives move nothing and have no peer to pair with.
  const bool dp_alone = replicas().size() == 1 && trainers().size() > 1;
  options.on_comm = [this, dp_group, dp_alone](const CommEvent& e) {
    if (s_->trace && !dp_alone) s_->trace->comm(e.op, dp_group, e.seq, e.bytes, e.t0, e.t1);
  };
  options.tp = &s_->mesh->tp();
  if (shape.pp > 1) options.pp = &s_->mesh->pp();
  const bool ep = config_.parallel.ep > 1;
  MS_ASSIGN_OR_RETURN(s_->dist,
                      OptimizerSet::create(replicas(), ep ? &s_->mesh->edp() : nullptr,
                                           ep ? &s_->mesh->ep() : nullptr, std::move(params),
                                           groups, config_.optim, options));
  s_->guard = std::make_unique<SpikeGuard>(config_.optim.spike_guard);
  return s_->resume_manifest ? load_optimizer_state() : Status::OK();
}

std::vector<model::Parameter*> Trainer::all_parameters() const {
  std::vector<model::Parameter*> out;
  for (const auto& chunk : s_->chunks) {
    for (model::Parameter& p : chunk->parameters()) out.push_back(&p);
  }
  return out;
}

// The last stage's copy of a tied embedding (its lm_head), when another stage holds the
// embedding itself: checkpoints and the gradient norm count the first stage's copy only.
bool Trainer::is_tied_copy(const model::Parameter& p) const {
  return config_.model.tie_embeddings && !s_->model->chunk().first &&
         p.name == "model.embed_tokens.weight";
}

// The whole model's size (every stage's parameters, from the parameter table).
void Trainer::log_model_size() const {
  int64_t total = s_->model->parameter_count(), active = s_->model->active_parameter_count();
  // A pipeline stage or an ep rank holds part of the model: count the whole parameter table.
  if (s_->pipeline.schedule.pp > 1 || config_.parallel.ep > 1) {
    const config::ModelConfig& c = config_.model;
    Result<std::vector<model::ParameterSpec>> specs = model::parameter_specs(c);
    total = 0;
    if (specs.ok()) {
      for (const model::ParameterSpec& spec : *specs) {
        int64_t n = 1;
        for (int64_t d : spec.global_shape) n *= d;
        total += n;
      }
    }
    const int64_t idle = c.moe.num_experts > 0 ? c.moe.num_experts - c.moe.top_k : 0;
    active = total - c.n_layers * idle * 3 * c.d_model * c.d_ff;
  }
  char line[200];
  std::snprintf(line, sizeof(line), "model: %.3fM parameters (%.3fM active), %.3f MFLOPs/token",
                static_cast<double>(total) / 1e6, static_cast<double>(active) / 1e6,
                s_->flops_per_token / 1e6);
  MS_LOG(Info) << line;
}

void Trainer::log_memory_plan() const {
  if (world_.rank() != 0) return;
  int64_t local = 0;
  int64_t activation_bytes = 0;
  for (const auto& chunk : s_->chunks) {
    for (const model::Parameter& p : chunk->parameters()) local += p.value.numel();
    activation_bytes += chunk->activation_bytes(config_.train.micro_batch,
                                                config_.train.seq_len / config_.parallel.cp);
  }
  const RankMemoryPlan mem = rank_memory_plan(local, replicas().size(), config_.parallel.zero == 1);
  const parallel::PpScheduleShape& shape = s_->pipeline.schedule;
  // Pipeline rank 0 holds the most micro-batches in flight (1F1B: pp of them).
  const int in_flight = shape.pp > 1 ? pp_peak_in_flight(shape, 0) : 1;
  std::string pp_part = shape.pp > 1 ? "pp " + std::to_string(shape.pp) + ", " : "";
  if (config_.parallel.cp > 1) pp_part += "cp " + std::to_string(config_.parallel.cp) + ", ";
  const double acts = static_cast<double>(activation_bytes) * in_flight / (1024.0 * 1024.0);
  char line[400];
  std::snprintf(line, sizeof(line),
                "memory per model rank (%stp %d, dp %d, zero %d): weights %.1f MiB, "
                "gradients %.1f MiB, optimizer state %.1f MiB; expected peak activations %.1f MiB "
                "(micro-batch %lld x %lld, %d in flight, recompute %s, sequence parallel %s)",
                pp_part.c_str(),
                s_->model->tp_size(), s_->dp, static_cast<int>(config_.parallel.zero),
                mem.weights_mib, mem.gradients_mib, mem.optimizer_mib, acts,
                static_cast<long long>(config_.train.micro_batch),
                static_cast<long long>(config_.train.seq_len), in_flight,
                std::string(config::enum_to_name(config_.parallel.recompute)).c_str(),
                s_->model->tp_size() > 1 && config_.parallel.sequence_parallel ? "on" : "off");
  MS_LOG(Info) << line;
}

Status Trainer::open_telemetry() {
  const comm::MeshCoord& coord = s_->mesh->coord();
  MS_ASSIGN_OR_RETURN(s_->telemetry, telemetry::TelemetryWriter::open(
                                         config_.run.dir, world_.rank(), log::host(),
                                         {coord.dp, coord.tp, coord.pp, coord.cp}, config_.telemetry.every_s));
  return Status::OK();
}

// The trace (opened with the clock offset to rank 0) and the MFU yardstick: the sgemm rates
// of all model ranks (dp x tp) added up. Collective.
Status Trainer::measure_yardsticks() {
  Status local = Status::OK();
  if (config_.telemetry.trace) {
    MS_ASSIGN_OR_RETURN(const comm::ClockOffset clock, comm::measure_clock_offset(trainers()));
    Result<std::unique_ptr<telemetry::TraceWriter>> trace =
        telemetry::TraceWriter::open(config_.run.dir, world_.rank(), clock.offset_s);
    if (trace.ok()) s_->trace = std::move(*trace);
    local = trace.status();
  }
  MS_RETURN_IF_ERROR(comm::agree(trainers(), local, "opening the trace"));
  double peak_gflops = config_.train.mfu_peak_gflops;
  if (peak_gflops <= 0) {
    // n = 512 for at least 0.3 s: long enough to reach the steady rate of the training matmuls.
    peak_gflops = ops::measure_sgemm_gflops(512, 3, 0.3);
    MS_LOG(Info) << "sgemm rate of rank 0: " << peak_gflops << " GFLOP/s (the MFU yardstick)";
  }
  double total = peak_gflops * 1e9;
  MS_RETURN_IF_ERROR(sum_in_rank_order(s_->mesh->model(), std::span<double>(&total, 1)));
  s_->peak_flops = total;
  return Status::OK();
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
  s_->dist->begin_step();
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

// Mean validation loss over train.eval_batches global batches, the same ones every time.
Result<double> Trainer::evaluate() {
  data::BatchSource& loader = *s_->eval_loader;
  loader.reset();
  const int64_t micro_batches = config_.train.eval_batches * loader.micro_batches_per_step();
  double local = 0;
  if (s_->pipeline_step) {
    std::vector<data::MicroBatch> batches;
    for (int64_t i = 0; i < micro_batches; ++i) {
      MS_ASSIGN_OR_RETURN(data::MicroBatch batch, loader.next());
      batches.push_back(local_tokens(std::move(batch)));
    }
    MS_ASSIGN_OR_RETURN(local, s_->pipeline_step->evaluate(batches));
    local *= static_cast<double>(micro_batches);
  }
  for (int64_t i = 0; s_->pipeline_step == nullptr && i < micro_batches; ++i) {
    MS_ASSIGN_OR_RETURN(data::MicroBatch whole, loader.next());
    const data::MicroBatch batch = local_tokens(std::move(whole));
    MS_ASSIGN_OR_RETURN(const model::LossStats stats,
                        s_->model->forward_loss(batch.inputs.data(), batch.targets.data(),
                                                batch.rows, batch.seq_len));
    local += stats.loss;
  }
  double mean = local / static_cast<double>(micro_batches);
  MS_RETURN_IF_ERROR(sum_in_rank_order(replicas(), std::span<double>(&mean, 1)));
  return mean / replicas().size();
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

// The longest time any trainer waited for its micro-batches (local reads or, with loader ranks,
// the transfer from them): the figure that says whether data loading kept up. Collective.
Status Trainer::log_data_wait(const TrainSummary& summary) {
  const int64_t steps = summary.steps_done - s_->start_step;
  // In microseconds: the communicators reduce no f64, and a log line needs no more precision.
  int64_t micros[2] = {std::llround(summary.data_wait_s * 1e6), std::llround(summary.step_time_s * 1e6)};
  MS_RETURN_IF_ERROR(trainers().allreduce(micros, micros, 2, DType::kI64, comm::ReduceOp::kMax));
  if (steps <= 0) return Status::OK();
  const double wait[2] = {static_cast<double>(micros[0]) / 1e6, static_cast<double>(micros[1]) / 1e6};
  char line[240];
  std::snprintf(line, sizeof(line),
                "data wait: %.3fs over %lld steps (%.1f%% of the step time, slowest trainer; %s)",
                wait[0], static_cast<long long>(steps), wait[1] > 0 ? wait[0] / wait[1] * 100.0 : 0.0,
                s_->loaders > 0 ? "batches from the loader ranks" : "local loaders");
  MS_LOG(Info) << line;
  return Status::OK();
}

// Closes the writers and logs the run's summary, including how much of the gradient
// reduction the overlap hid.
Status Trainer::finish(TrainSummary& summary) {
  const parallel::CommStats& c = summary.comm;
  if (s_->dp > 1 && summary.steps_done > 0) {
    char line[300];
    std::snprintf(line, sizeof(line),
                  "data-parallel gradient reduction: %lld collectives, %.1f MiB per step; "
                  "%.0f%% hidden behind backward (waited %.3fs of %.3fs)",
                  static_cast<long long>(c.collectives / summary.steps_done),
                  static_cast<double>(c.bytes) / summary.steps_done / (1024.0 * 1024.0),
                  c.hidden_fraction() * 100.0, c.exposed_s, c.active_s);
    MS_LOG(Info) << line;
  }
  // "Up to": a chunk's completion is only seen when the model polls between GEMMs, so the
  // time in flight includes compute the transfer may not have used.
  const parallel::CommStats& t = summary.tp_comm;
  if (s_->model->tp_size() > 1 && summary.steps_done > 0 && t.collectives > 0) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const std::string mode =
        config_.parallel.tp_overlap
            ? "parallel.tp_overlap in " + std::to_string(config_.parallel.tp_overlap_chunks) +
                  " chunks"
            : "parallel.tp_overlap off";
    char line[320];
    std::snprintf(line, sizeof(line),
                  "tensor-parallel communication: %.0f collectives, %.1f MiB per step; up to "
                  "%.0f%% hidden behind compute (waited %.3fs of %.3fs in flight; %s)",
                  static_cast<double>(t.collectives) / steps,
                  static_cast<double>(t.bytes) / steps / (1024.0 * 1024.0),
                  t.hidden_fraction() * 100.0, t.exposed_s, t.active_s, mode.c_str());
    MS_LOG(Info) << line;
  }
  if (config_.parallel.ep > 1 && summary.steps_done > s_->start_step) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const parallel::CommStats& e = s_->ep_stats;
    char line[400];
    std::snprintf(line, sizeof(line),
                  "expert-parallel all-to-all: %.0f all-to-alls, %.1f MiB sent to other ranks "
                  "per step; up to %.0f%% hidden behind compute (waited %.3fs of %.3fs in "
                  "flight; ep %lld, parallel.ep_overlap_chunks %lld; rank 0)",
                  static_cast<double>(e.collectives) / steps,
                  static_cast<double>(e.bytes) / steps / (1024.0 * 1024.0),
                  e.hidden_fraction() * 100.0, e.exposed_s, e.active_s,
                  static_cast<long long>(config_.parallel.ep),
                  static_cast<long long>(config_.parallel.ep_overlap_chunks));
    MS_LOG(Info) << line;
  }
  if (summary.steps_done > s_->start_step) {
    // The attention's share (with cp its ring) and this process's peak memory: what context
    // parallelism divides, measured (scripts/bench/train_cp_bench.sh reads both).
    std::string peak = "unknown";
    if (Result<std::string> status = read_text_file("/proc/self/status"); status.ok()) {
      if (Result<uint64_t> bytes = parse_peak_rss_bytes(*status); bytes.ok()) {
        peak = std::to_string(*bytes / (1024 * 1024)) + " MiB";
      }
    }
    char line[300];
    std::snprintf(line, sizeof(line),
                  "attention %.3fs of %.3fs of steps (forward and backward); peak resident "
                  "memory %s (VmHWM; rank 0)",
                  s_->attention_s, summary.step_time_s, peak.c_str());
    MS_LOG(Info) << line;
  }
  if (config_.parallel.cp > 1 && summary.steps_done > s_->start_step) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const parallel::CommStats& c = s_->cp_stats;
    char line[400];
    std::snprintf(line, sizeof(line),
                  "context-parallel ring attention: %.0f transfers, %.1f MiB sent per step; up "
                  "to %.0f%% hidden behind attention (waited %.3fs of %.3fs in flight; cp %lld; "
                  "rank 0)",
                  static_cast<double>(c.collectives) / steps,
                  static_cast<double>(c.bytes) / steps / (1024.0 * 1024.0),
                  c.hidden_fraction() * 100.0, c.exposed_s, c.active_s,
                  static_cast<long long>(config_.parallel.cp));
    MS_LOG(Info) << line;
  }
  if (config_.model.moe.capacity_factor > 0 && summary.steps_done > s_->start_step) {
    MS_LOG(Info) << "model.moe.capacity_factor " << config_.model.moe.capacity_factor
                 << " dropped " << summary.dropped_tokens
                 << " expert assignment(s) over the run (every rank, every layer)";
  }
  if (s_->pipeline_step && summary.steps_done > s_->start_step) {
    const double steps = static_cast<double>(summary.steps_done - s_->start_step);
    const parallel::PpP2pStats& p = s_->pp_stats;
    char line[300];
    std::snprintf(line, sizeof(line),
                  "pipeline point-to-point: %.0f messages, %.1f MiB sent per step by this rank; "
                  "%.3fs of the run blocked in receives (rank 0)",
                  static_cast<double>(p.messages_sent) / steps,
                  static_cast<double>(p.bytes_sent) / steps / (1024.0 * 1024.0), p.recv_wait_s);
    MS_LOG(Info) << line;
  }
  MS_RETURN_IF_ERROR(log_data_wait(summary));
  if (summary.steps_while_saving > 0 && summary.steps_not_saving > 0) {
    const double during = summary.time_while_saving_s / summary.steps_while_saving;
    const double other = summary.time_not_saving_s / summary.steps_not_saving;
    char line[240];
    std::snprintf(line, sizeof(line),
                  "checkpoint writes: %lld step(s) ran while a save was writing, %.3fs each "
                  "against %.3fs without (%.2fx the speed; rank 0)",
                  static_cast<long long>(summary.steps_while_saving), during, other,
                  during > 0 ? other / during : 0.0);
    MS_LOG(Info) << line;
  }
  if (summary.skipped_updates > 0) {
    MS_LOG(Info) << "the spike guard skipped " << summary.skipped_updates << " update(s)";
  }
  if (s_->trace) MS_RETURN_IF_ERROR(s_->trace->flush());
  return s_->telemetry->close();
}

}  // namespace ms::train
