// The trainer's start-up wiring and its teardown: the config checks, the watchdog and the mesh,
// the data sources (local loaders, or clients of the loader ranks), the run directory, the model
// chunks and the distributed optimizer, telemetry, the trace and the MFU yardstick, the pipeline
// executor; and releasing the loader ranks at the end. The step is in trainer.cc.
#include "train/trainer.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "comm/agree.h"
#include "comm/clock_offset.h"
#include "comm/mesh.h"
#include "core/logging.h"
#include "data/disaggregated.h"
#include "data/loader.h"
#include "model/transformer.h"
#include "ops/backend_registry.h"
#include "ops/sgemm_rate.h"
#include "telemetry/writer.h"
#include "train/document_mask.h"
#include "train/layer_shape.h"
#include "train/layout_report.h"
#include "train/rank_sum.h"
#include "train/run_checks.h"
#include "train/run_dir.h"
#include "train/stop_signal.h"
#include "train/tp_batch_source.h"
#include "train/trainer_state.h"

namespace ms::train {
namespace {

// The name a group's collectives carry in the trace, where events pair up by (group, seq):
// the axis ("dp", "tp", "pp") when one group spans every trainer, else the axis and the
// group's lowest world rank ("dp.2"), so the dp groups of different stages stay apart
// (ms-diagnose reads the kind up to the '.').
std::string trace_group_name(const comm::Communicator& group, int trainers) {
  if (group.size() == trainers) return group.name();
  return group.name() + "." + std::to_string(group.world_ranks().front());
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::create(config::RunConfig config,
                                                 comm::Communicator& world) {
  std::unique_ptr<Trainer> trainer(new Trainer(std::move(config), world));
  MS_RETURN_IF_ERROR(trainer->build());
  return trainer;
}

Status Trainer::simulate_link() {
  const config::CompressSettings& k = config_.parallel.compress;
  const config::SimulatedLinkConfig& link = config_.comm.simulate_link;
  if (k.grads == "none" && k.weights == "none" && link.gbps <= 0) return Status::OK();
  MS_ASSIGN_OR_RETURN(s_->node_of_world_rank,
                      comm::node_ids(world_, config_.comm.ranks_per_node));
  if (link.gbps > 0) {
    s_->link = std::make_unique<comm::SimulatedLink>(
        world_, s_->node_of_world_rank, comm::LinkModel{link.gbps, link.latency_us});
  }
  return Status::OK();
}

void Trainer::set_compression(DistributedOptimizerOptions& options) const {
  const config::CompressSettings& k = config_.parallel.compress;
  const auto bits = [](const std::string& format) {
    return format == "int8" ? 8 : format == "int4" ? 4 : 0;
  };
  parallel::CompressConfig& c = options.compress;
  c.two_level = k.grads == "two-level";
  c.grad_bits = c.two_level ? 0 : bits(k.grads);
  c.group_size = k.group_size;
  c.inter_group_size = k.inter_group_size;
  c.hadamard = k.hadamard;
  c.error_feedback = k.error_feedback;
  c.weight_bits = bits(k.weights);
  c.weight_group_size = k.group_size;
  c.weight_diff = k.weight_diff;
  c.stochastic = k.rounding == "stochastic";
  c.seed = static_cast<uint64_t>(config_.run.seed);
  options.compress_min_numel = k.min_numel;
  options.compress_reset_every = k.reset_every;
  options.check_replicas = k.check_replicas;
  options.node_of_world_rank = s_->node_of_world_rank;
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
  MS_RETURN_IF_ERROR(simulate_link());
  MS_ASSIGN_OR_RETURN(comm::Mesh mesh,
                      comm::Mesh::create(s_->link ? *s_->link : world_, shape));
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
Status Trainer::open_device() {
  MS_ASSIGN_OR_RETURN(s_->device, parse_device(config_.train.device));
  if (!s_->device.is_host() && trainers().size() > 1) {
    // The layouts' exchanges move host memory over MPI; NCCL on device memory is issue 44's.
    return FailedPrecondition("train.device: " + config_.train.device + " trains on one rank "
                              "for now (this layout has " + std::to_string(trainers().size()) +
                              " model ranks); multi-GPU layouts are not built yet");
  }
  const ops::MatmulPrecision precision = matmul_precision();
  Result<ops::Backend*> backend = ops::backend_for(s_->device, precision);
  if (!backend.ok()) {
    return Status(backend.status().code(), "train.device: " + backend.status().message());
  }
  s_->backend = *backend;
  if (world_.rank() == 0 && (!s_->device.is_host() || precision != ops::MatmulPrecision::kF32)) {
    MS_LOG(Info) << "device: " << ops::describe_device(s_->device) << ", precision "
                 << ops::matmul_precision_name(precision);
  }
  return Status::OK();
}

Status Trainer::build_model() {
  MS_RETURN_IF_ERROR(open_device());
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
    parallel.backend = s_->backend;
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
  options.backend = s_->backend;
  if (shape.pp > 1) options.pp = &s_->mesh->pp();
  set_compression(options);
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
  // At bf16 the backend's copies of the largest call's operands (train/layer_shape.h); the LM
  // head's, the largest, only where this rank holds it.
  bool lm_head = false;
  for (const auto& chunk : s_->chunks) lm_head = lm_head || chunk->chunk().last;
  const double copies =
      bf16_scratch_bytes(config_, !s_->device.is_host(), lm_head) / (1024.0 * 1024.0);
  s_->predicted_mib = mem.weights_mib + mem.gradients_mib + mem.optimizer_mib + acts + copies;
  if (world_.rank() != 0) return;
  char copies_part[64] = "";
  if (copies > 0) {
    std::snprintf(copies_part, sizeof(copies_part), ", bf16 operand copies %.1f MiB", copies);
  }
  char line[448];
  std::snprintf(line, sizeof(line),
                "memory per model rank (%stp %d, dp %d, zero %d): weights %.1f MiB, "
                "gradients %.1f MiB, optimizer state %.1f MiB; expected peak activations %.1f MiB "
                "(micro-batch %lld x %lld, %d in flight, recompute %s, sequence parallel %s)%s",
                pp_part.c_str(),
                s_->model->tp_size(), s_->dp, static_cast<int>(config_.parallel.zero),
                mem.weights_mib, mem.gradients_mib, mem.optimizer_mib, acts,
                static_cast<long long>(config_.train.micro_batch),
                static_cast<long long>(config_.train.seq_len), in_flight,
                std::string(config::enum_to_name(config_.parallel.recompute)).c_str(),
                s_->model->tp_size() > 1 && config_.parallel.sequence_parallel ? "on" : "off",
                copies_part);
  MS_LOG(Info) << line;
}

Status Trainer::open_telemetry() {
  const comm::MeshCoord& coord = s_->mesh->coord();
  MS_ASSIGN_OR_RETURN(s_->telemetry, telemetry::TelemetryWriter::open(
                                         config_.run.dir, world_.rank(), log::host(),
                                         {coord.dp, coord.tp, coord.pp, coord.cp}, config_.telemetry.every_s));
  if (!s_->device.is_host()) {
    // The device arena's use beside the memory plan's prediction, in every host record.
    const Device device = s_->device;
    const double predicted = s_->predicted_mib * 1024.0 * 1024.0;
    s_->telemetry->set_host_extra([device, predicted] {
      const ops::DeviceMemory m = ops::device_memory(device);
      return std::map<std::string, double>{
          {"device_mem_in_use_bytes", static_cast<double>(m.in_use)},
          {"device_mem_peak_bytes", static_cast<double>(m.peak)},
          {"device_mem_arena_bytes", static_cast<double>(m.capacity)},
          {"device_mem_predicted_bytes", predicted}};
    });
  }
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
  if (peak_gflops <= 0 && !s_->device.is_host()) {
    // A GPU's dense peak at the run's precision from its architecture (f32: the CUDA cores, TF32
    // off; bf16: the tensor cores), the measured cuBLASLt rates beside it; the measured rate
    // where the architecture is not in the table.
    MS_ASSIGN_OR_RETURN(const ops::DeviceRates rates, ops::device_rates(s_->device));
    const bool bf16 = matmul_precision() == ops::MatmulPrecision::kBf16;
    const double peak = bf16 ? rates.bf16_peak_gflops : rates.peak_gflops;
    peak_gflops = peak > 0 ? peak : bf16 ? rates.bf16_measured_gflops : rates.measured_gflops;
    char line[384];
    std::snprintf(line, sizeof(line),
                  "%s: f32 dense peak %.0f GFLOP/s, cuBLASLt sgemm measured %.0f GFLOP/s; bf16 "
                  "dense peak %.0f GFLOP/s, cuBLASLt bf16 measured %.0f GFLOP/s; MFU against the "
                  "%s %s",
                  ops::describe_device(s_->device).c_str(), rates.peak_gflops,
                  rates.measured_gflops, rates.bf16_peak_gflops, rates.bf16_measured_gflops,
                  bf16 ? "bf16" : "f32", peak > 0 ? "peak" : "measured rate");
    MS_LOG(Info) << line;
  }
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

}  // namespace ms::train
