#include "rl/rl_run.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <nlohmann/json.hpp>

#include "comm/agree.h"
#include "comm/variable_length.h"
#include "core/timer.h"
#include "infer/model_loader.h"
#include "io/env.h"
#include "model/transformer.h"
#include "rl/actor.h"
#include "rl/advantage.h"
#include "rl/losses.h"
#include "rl/rl_state.h"
#include "rl/rollout.h"
#include "rl/rollout_exchange.h"
#include "rl/step_rollouts.h"
#include "telemetry/writer.h"
#include "train/distributed_optimizer.h"
#include "train/rank_sum.h"
#include "train/run_dir.h"
#include "train/schedule.h"

namespace ms::rl {
namespace {

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

// Finishes a step of `optimizer`: the gradient reduction, the norm, clipping at
// optim.grad_clip and the update at `lr`. Returns the norm before clipping. Collective.
Result<double> apply_update(train::DistributedOptimizer& optimizer,
                            const config::OptimConfig& optim, double lr) {
  MS_RETURN_IF_ERROR(optimizer.finish_reduction());
  MS_ASSIGN_OR_RETURN(const double norm, optimizer.grad_norm());
  const double clip =
      optim.grad_clip > 0.0 && norm > optim.grad_clip ? optim.grad_clip / (norm + 1e-6) : 1.0;
  MS_RETURN_IF_ERROR(optimizer.apply(lr, clip));
  return norm;
}

// The critic's figures of a step from the values it gave at rollout time: the means of the
// values and returns over every rank's response tokens, and the explained variance
// 1 - Var(R - V) / Var(R) (verl's vf_explained_var; 0 when the returns do not vary).
Status record_value_statistics(comm::Communicator& dp, std::span<const double> values,
                               std::span<const double> returns, StepMetrics& m) {
  // Token count; sums of V, R, R^2, R - V and (R - V)^2.
  std::vector<double> sums = {static_cast<double>(values.size()), 0, 0, 0, 0, 0};
  for (size_t k = 0; k < values.size(); ++k) {
    const double residual = returns[k] - values[k];
    sums[1] += values[k];
    sums[2] += returns[k];
    sums[3] += returns[k] * returns[k];
    sums[4] += residual;
    sums[5] += residual * residual;
  }
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(dp, sums));
  const double n = sums[0];
  if (n == 0.0) return Status::OK();
  m.value_mean = sums[1] / n;
  m.return_mean = sums[2] / n;
  const double return_var = sums[3] / n - m.return_mean * m.return_mean;
  const double residual_var = sums[5] / n - (sums[4] / n) * (sums[4] / n);
  m.explained_variance = return_var > 1e-12 ? 1.0 - residual_var / return_var : 0.0;
  return Status::OK();
}

// The most bytes any member of `group` received in its whole-weight gathers since the
// previous step's record, and the longest any took, into m. Collective over group.
Status record_reshard(comm::Communicator& group, const ReshardReport& mine, StepMetrics& m) {
  m.resharded = true;
  const std::vector<double> local = {static_cast<double>(mine.bytes_received), mine.seconds};
  std::vector<double> all(local.size() * static_cast<size_t>(group.size()));
  MS_RETURN_IF_ERROR(group.allgather(local.data(), all.data(), sizeof(double) * local.size(),
                                     DType::kU8));
  for (size_t r = 0; r < all.size(); r += 2) {
    m.reshard_bytes = std::max(m.reshard_bytes, static_cast<int64_t>(all[r]));
    m.reshard_s = std::max(m.reshard_s, all[r + 1]);
  }
  return Status::OK();
}

}  // namespace

std::string step_metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j = {
      {"step", m.step}, {"mean_reward", m.mean_reward}, {"accuracy", m.accuracy},
      {"response_length", m.response_length}, {"entropy", m.entropy},
      {"clip_fraction", m.clip_fraction}, {"dual_clip_fraction", m.dual_clip_fraction},
      {"policy_kl", m.policy_kl}, {"ref_kl", m.ref_kl}, {"loss", m.loss},
      {"grad_norm", m.grad_norm}, {"lr", m.lr}, {"kept_groups", m.kept_groups},
      {"dropped_groups", m.dropped_groups}, {"rounds", m.rounds},
      {"response_tokens", m.response_tokens}, {"updates", m.updates},
      {"flawed_positives", m.flawed_positives},
      {"tokens_per_forward", m.tokens_per_forward}, {"draft_acceptance", m.draft_acceptance},
      {"weight_version", m.weight_version},
      {"rollout_s", m.rollout_s}, {"update_s", m.update_s}};
  if (m.critic_updates > 0) {
    j["value_loss"] = m.value_loss;
    j["value_clip_fraction"] = m.value_clip_fraction;
    j["critic_grad_norm"] = m.critic_grad_norm;
    j["value_mean"] = m.value_mean;
    j["return_mean"] = m.return_mean;
    j["explained_variance"] = m.explained_variance;
    j["critic_updates"] = m.critic_updates;
  }
  if (m.resharded) {
    j["reshard_bytes"] = m.reshard_bytes;
    j["reshard_s"] = m.reshard_s;
  }
  if (m.waited) j["rollout_wait_s"] = m.rollout_wait_s;
  return j.dump();
}

RlRun::RlRun(std::unique_ptr<State> state) : s_(std::move(state)) {}
RlRun::~RlRun() = default;

// The ranks' roles and groups (rl_state.h): which ranks train and which generate, the trainers'
// tp and dp groups, and under split placement the group the weights travel in. Collective over
// world (the splits). InvalidArgument for a layout the ranks cannot form, before any split.
Status RlRun::State::form_groups(comm::Communicator& w) {
  world = &w;
  const int tp = static_cast<int>(config.tp);
  const int rollout_ranks = static_cast<int>(config.rollout_ranks);
  const bool split = rollout_ranks > 0;
  if (rollout_ranks >= w.size()) {
    return InvalidArgument("placement.rollout_ranks (" + std::to_string(rollout_ranks) +
                           ") must leave at least one of the " + std::to_string(w.size()) +
                           " ranks to train");
  }
  const int training = w.size() - rollout_ranks;
  if (training % tp != 0) {
    return InvalidArgument("parallel.tp (" + std::to_string(tp) + ") must divide " +
                           (split ? "the training ranks" : "the ranks") + " (" +
                           std::to_string(training) + ")");
  }
  const int64_t P = config.prompts_per_step;
  gen_count = split ? rollout_ranks : w.size();
  if (P % gen_count != 0 || P % (training / tp) != 0) {
    return InvalidArgument(
        "rollout.prompts_per_step (" + std::to_string(P) + ") must be a multiple of " +
        (split ? "the rollout ranks (" + std::to_string(gen_count) + ") and of the "
                 "data-parallel ranks (" + std::to_string(training / tp) + ")"
               : "the ranks (" + std::to_string(gen_count) + ")") +
        ": each generates, and each data-parallel rank trains, an equal share of every "
        "round's groups");
  }
  trains = w.rank() < training;
  generates = !split || !trains;
  gen_index = !generates ? -1 : split ? w.rank() - training : w.rank();
  trainers = &w;
  if (split) {
    MS_ASSIGN_OR_RETURN(trainer_group, w.split(trains ? 0 : comm::Communicator::kNoColor,
                                               w.rank(), "rl.train"));
    trainers = trainer_group.get();
  }
  if (trains) {
    dp = trainers;
    if (tp > 1) {
      MS_ASSIGN_OR_RETURN(tp_group, trainers->split(trainers->rank() / tp, trainers->rank(),
                                                    "rl.tp"));
      MS_ASSIGN_OR_RETURN(dp_group, trainers->split(trainers->rank() % tp, trainers->rank(),
                                                    "rl.dp"));
      dp = dp_group.get();
    }
  }
  if (split) {
    // Trainers of dp rank 0 are world ranks 0 .. tp - 1: members 0 .. tp - 1, the holders.
    const bool member = generates || dp->rank() == 0;
    MS_ASSIGN_OR_RETURN(weights_group, w.split(member ? 0 : comm::Communicator::kNoColor,
                                               w.rank(), "rl.weights"));
    MS_ASSIGN_OR_RETURN(rollout_group, w.split(generates ? 0 : comm::Communicator::kNoColor,
                                               w.rank(), "rl.rollout"));
    first_rollout_rank = training;
    staleness = std::max<int64_t>(0, config.async_staleness);
  }
  return Status::OK();
}

Result<std::unique_ptr<RlRun>> RlRun::create(const RlConfig& config, comm::Communicator& world,
                                             std::function<void(const std::string&)> log) {
  auto s = std::make_unique<State>();
  s->config = config;
  MS_RETURN_IF_ERROR(s->form_groups(world));
  const int tp = static_cast<int>(config.tp);
  const bool split = config.rollout_ranks > 0;
  s->log = world.rank() == 0 ? std::move(log) : [](const std::string&) {};
  // Rank 0 holds the run directory's lock, taken before anything is written there; the others
  // learn of a refusal from the agreement below.
  Status local = Status::OK();
  if (world.rank() == 0) {
    Result<io::DirectoryLock> lock = train::lock_run_directory(config.run_dir);
    if (lock.ok()) s->lock.emplace(std::move(*lock));
    local = lock.status();
  }
  MS_RETURN_IF_ERROR(comm::agree(world, local, "locking run.dir"));
  local = s->load();
  MS_RETURN_IF_ERROR(comm::agree(world, local, "loading the actor and the prompts"));
  if (s->trains) {
    // Each trained model's optimizer adopts its trainable parameters, in the order kept for
    // its checkpoints (SavedModel::trainable).
    train::DistributedOptimizerOptions options;
    options.overlap = false;
    options.tp = s->tp_group.get();
    const auto adopt = [&](const SavedModel& m, const config::OptimConfig& optim,
                           std::vector<model::Parameter*>& trainable)
        -> Result<std::unique_ptr<train::DistributedOptimizer>> {
      std::vector<train::TrainableParam> params;
      for (model::Parameter* p : m.parameters) {
        if (!p->trainable) continue;
        params.push_back({m.prefix + p->name, &p->value, &p->grad, p->weight_decay,
                          p->shard.is_replicated(), true});
        trainable.push_back(p);
      }
      return train::DistributedOptimizer::create(*s->dp, std::move(params), optim, options);
    };
    const std::vector<SavedModel> models = s->saved_models();
    MS_ASSIGN_OR_RETURN(s->optimizer, adopt(models[0], config.optimizer, s->trainable));
    if (s->critic) {
      MS_ASSIGN_OR_RETURN(s->critic_optimizer,
                          adopt(models[1], critic_optimizer(config), s->critic_trainable));
    }
    local = s->restore_optimizer_and_position();
  }
  if (local.ok() && world.rank() == 0) local = s->trim_run_files();
  MS_RETURN_IF_ERROR(comm::agree(world, local, "resuming from " + s->resume_dir));
  if (split) MS_RETURN_IF_ERROR(s->share_position());
  // After the optimizer adopted the parameters (their values now live in its flat buffer), so
  // the engine reads exactly what each update writes.
  local = s->open_outputs();
  if (split && s->trains && local.ok()) {
    // The older versions the first steps need: the checkpoint's, a missing one taken from the
    // next newer version (the actor's own at the newest).
    s->actor_version = s->start_step;
    s->held = std::move(s->resumed_versions);
    const int substituted = fill_missing_versions(
        s->held, s->version_for(s->start_step + 1), s->start_step, copy_weights(*s->actor));
    if (substituted > 0) s->warn_substituted(substituted);
  }
  if (local.ok() && config.async_staleness >= 0 && !split) {
    int substituted = 0;
    Result<std::unique_ptr<AsyncRollouts>> async =
        AsyncRollouts::start(config, *s->dp, *s->reference.tokenizer, s->prompts, *s->actor,
                             s->stream, s->start_step, s->pad, std::move(s->resumed_versions),
                             &substituted);
    if (async.ok()) s->async = std::move(*async);
    local = async.status();
    if (substituted > 0) s->warn_substituted(substituted);
  }
  MS_RETURN_IF_ERROR(comm::agree(world, local, "starting the rollout engine and the run's files"));
  if (split) MS_RETURN_IF_ERROR(s->send_version(s->version_for(s->start_step + 1)));
  const int dp_size = (world.size() - static_cast<int>(config.rollout_ranks)) / tp;
  s->log("rl: " + std::string(algorithm_name(config.algorithm)) + ", " +
         std::to_string(s->prompts.size()) + " prompts, G = " + std::to_string(config.group_size) +
         ", " + std::to_string(config.prompts_per_step) + " groups per step over " +
         std::to_string(dp_size) + " data-parallel rank(s)" +
         (tp > 1 ? " x tp " + std::to_string(tp) : std::string()) +
         (split ? ", " + std::to_string(config.rollout_ranks) + " rollout rank(s)"
                : std::string()) +
         ", loss " + std::string(loss_aggregation_name(config.loss_agg)) +
         (s->actor ? ", actor " + std::to_string(s->actor->parameter_count()) + " parameters"
                   : std::string()) +
         (s->critic ? ", critic lr " + std::to_string(config.critic_lr) + " with " +
                          std::to_string(config.critic_warmup_steps) + " value pretraining steps"
                    : std::string()));
  if (s->reshards()) {
    // What each rank received in the first gather: the same every step.
    const uint64_t mine = s->unreported_reshard.bytes_received;
    std::vector<uint64_t> bytes(static_cast<size_t>(world.size()));
    MS_RETURN_IF_ERROR(world.allgather(&mine, bytes.data(), sizeof mine, DType::kU8));
    std::string list;
    for (uint64_t b : bytes) list += (list.empty() ? "" : ", ") + std::to_string(b);
    s->log("rl: hybrid engine: training at tp " + std::to_string(tp) + " x dp " +
           std::to_string(dp_size) + ", generating at tp 1 x dp " +
           std::to_string(s->gen_count) +
           (split ? " on " + std::to_string(config.rollout_ranks) + " rollout-only rank(s) "
                    "(split placement); after each step the trainers send the rollout ranks"
                  : "; after each step every rank gathers") +
           " the whole weights in memory, bytes received per rank: " + list);
  }
  return std::unique_ptr<RlRun>(new RlRun(std::move(s)));
}

// Every rank reads the prompts and loads the configured actor. A training rank makes the
// actor (its tp slices of it; a resumed run's weights replace the loaded ones) and keeps the
// loaded model as the KL reference, or as the rollout model under tp; a rollout-only rank
// keeps it as its rollout model. The generating ranks take contiguous shares of the held-out
// prompts.
Status RlRun::State::load() {
  MS_ASSIGN_OR_RETURN(reference, infer::load_model(config.model_dir, config.checkpoint));
  if (!reference.tokenizer) return InvalidArgument("the actor has no tokenizer.json beside its weights");
  // JSON lines, or ms-data datasets of the prompts and of their answers.
  const auto read = [&](const std::string& path, const std::string& answers) {
    return answers.empty() ? read_prompt_dataset(path)
                           : read_prompt_datasets(path, answers, *reference.tokenizer);
  };
  MS_ASSIGN_OR_RETURN(prompts, read(config.train_prompts, config.train_answers));
  if (!config.eval_prompts.empty()) {
    MS_ASSIGN_OR_RETURN(eval_prompts, read(config.eval_prompts, config.eval_answers));
    if (config.eval_limit > 0 && static_cast<int64_t>(eval_prompts.size()) > config.eval_limit) {
      eval_prompts.resize(static_cast<size_t>(config.eval_limit));
    }
    if (generates) {
      const size_t n = eval_prompts.size(), ranks = static_cast<size_t>(gen_count);
      const size_t r = static_cast<size_t>(gen_index);
      eval_share = std::span<const PromptExample>(eval_prompts).subspan(
          n * r / ranks, n * (r + 1) / ranks - n * r / ranks);
    }
  }
  pad = reference.tokenizer->eos_id();
  stream = PromptStream::shuffled(prompts.size(), config.seed);
  const config::ModelConfig& mc = reference.model->config();
  if (!trains) {
    rollout_model = std::move(reference.model);
    return Status::OK();
  }
  // The actor: a training model (gradients, kRandom layout) with the loaded values copied into
  // the slices it holds. Sequence parallelism would need tp to divide every micro-batch's
  // tokens, which RL's packed micro-batches do not promise.
  model::ModelParallel parallel;
  parallel.tp = tp_group.get();
  parallel.sequence_parallel = false;
  MS_ASSIGN_OR_RETURN(actor, model::Transformer::create(mc, config.seed, parallel));
  auto& dst = actor->parameters();
  const auto& src = reference.model->parameters();
  if (dst.size() != src.size()) return Internal("actor and checkpoint parameter tables differ");
  for (size_t i = 0; i < dst.size(); ++i) {
    if (dst[i].name != src[i].name || dst[i].global_shape != src[i].global_shape) {
      return Internal("actor parameter " + dst[i].name + " does not match the checkpoint's");
    }
    MS_ASSIGN_OR_RETURN(const std::vector<comm::OverlapRun> runs,
                        comm::overlap_runs(src[i].shard, dst[i].shard));
    for (const comm::OverlapRun& run : runs) {
      std::copy_n(src[i].value.data<float>() + run.a_offset, run.length,
                  dst[i].value.data<float>() + run.b_offset);
    }
  }
  if (generates && tp_group) {
    // The engine's whole model: the loaded one itself when no KL reference needs it.
    if (config.kl_coef == 0.0) {
      rollout_model = std::move(reference.model);
    } else {
      MS_ASSIGN_OR_RETURN(rollout_model, model::Transformer::create(
                                             mc, config.seed, {}, model::ParameterValues::kToLoad));
    }
  }
  if (config.kl_coef == 0.0) reference.model.reset();  // no reference model needed
  if (has_critic(config.algorithm)) {
    MS_ASSIGN_OR_RETURN(critic, Critic::create(*actor, tp_group.get()));
  }
  return find_and_load_weights();  // a resumed run's actor replaces the loaded one
}

// On a generating rank the engine on the actor (on the gathered rollout model under tp or
// split placement), on a training rank its telemetry file, and on rank 0 the run's JSON lines.
Status RlRun::State::open_outputs() {
  MS_RETURN_IF_ERROR(refresh_rollout_model());
  if (generates) {
    MS_ASSIGN_OR_RETURN(rollouts,
                        RolloutGenerator::create(rollout_model ? *rollout_model : *actor,
                                                 *reference.tokenizer, config, prompts));
  }
  if (!trains) return Status::OK();
  telemetry::MeshCoord coord;
  coord.dp = dp->rank();
  coord.tp = tp_group ? tp_group->rank() : 0;
  MS_ASSIGN_OR_RETURN(telemetry, telemetry::TelemetryWriter::open(config.run_dir, world->rank(),
                                                                  hostname(), coord, 0.0));
  if (world->rank() != 0) return Status::OK();
  steps_file.open(config.run_dir + "/rl_steps.jsonl", std::ios::app);
  eval_file.open(config.run_dir + "/rl_eval.jsonl", std::ios::app);
  if (!steps_file || !eval_file) {
    return IOError("cannot open rl_steps.jsonl / rl_eval.jsonl in " + config.run_dir);
  }
  return Status::OK();
}

Status RlRun::State::refresh_rollout_model() {
  // Split placement sends its versions on its own schedule (send_version).
  if (!rollout_stale || config.rollout_ranks > 0 || !rollout_model) return Status::OK();
  rollout_stale = false;
  MS_ASSIGN_OR_RETURN(const ReshardReport r,
                      gather_whole_weights(*tp_group, tp_group->size(), &actor->parameters(),
                                           &rollout_model->parameters()));
  unreported_reshard.bytes_received += r.bytes_received;
  unreported_reshard.seconds += r.seconds;
  return Status::OK();
}

void RlRun::State::warn_substituted(int versions) const {
  log("rl: warning: " + resume_dir + " holds " + std::to_string(versions) +
      " fewer older weight version(s) than rollout.async_staleness " +
      std::to_string(config.async_staleness) + " needs (saved at another staleness or "
      "synchronously): the next rollouts use newer weights, so this run is not bitwise the "
      "uninterrupted one");
}

Status RlRun::State::with_version(int64_t v, const std::function<Status()>& fn) {
  if (v == actor_version) return fn();
  const auto it = held.find(v);
  if (it == held.end()) {
    return Internal("weight version " + std::to_string(v) + " is not held (the actor is at " +
                    std::to_string(actor_version) + ")");
  }
  // Swapping twice restores the actor bit for bit, without a third copy.
  const auto swap_in = [&] {
    std::vector<model::Parameter>& params = actor->parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      std::swap_ranges(it->second[i].begin(), it->second[i].end(),
                       params[i].value.data<float>());
    }
  };
  swap_in();
  const Status result = fn();
  swap_in();
  return result;
}

Status RlRun::State::send_version(int64_t v) {
  if (v == sent_version) return Status::OK();
  sent_version = v;
  if (!weights_group) return Status::OK();  // a trainer of another dp rank
  ReshardReport r;
  const auto gather = [&]() -> Status {
    MS_ASSIGN_OR_RETURN(r, gather_whole_weights(
                               *weights_group, static_cast<int>(config.tp),
                               trains ? &actor->parameters() : nullptr,
                               rollout_model ? &rollout_model->parameters() : nullptr));
    return Status::OK();
  };
  MS_RETURN_IF_ERROR(trains ? with_version(v, gather) : gather());
  unreported_reshard.bytes_received += r.bytes_received;
  unreported_reshard.seconds += r.seconds;
  return Status::OK();
}

std::vector<std::pair<int64_t, const std::vector<std::vector<float>>*>>
RlRun::State::versions_to_save(int64_t step) {
  if (async) return async->held_versions_before(step);
  std::vector<std::pair<int64_t, const std::vector<std::vector<float>>*>> out;
  for (auto it = held.begin(); it != held.lower_bound(step); ++it) {
    out.emplace_back(it->first, &it->second);
  }
  return out;
}

Status RlRun::State::share_position() {
  std::string bytes;
  if (world->rank() == 0) bytes = std::to_string(start_step) + ' ' + stream.encode();
  MS_RETURN_IF_ERROR(comm::broadcast_variable(*world, bytes, 0));
  if (world->rank() == 0) return Status::OK();
  const size_t space = bytes.find(' ');
  if (space == std::string::npos) return Internal("the run's position from rank 0 does not parse");
  start_step = std::stoll(bytes.substr(0, space));
  MS_ASSIGN_OR_RETURN(stream, PromptStream::decode(bytes.substr(space + 1)));
  return Status::OK();
}

Status RlRun::evaluate(int64_t step) {
  if (s_->eval_prompts.empty()) return Status::OK();
  comm::Communicator& world = *s_->world;
  MS_RETURN_IF_ERROR(s_->refresh_rollout_model());
  Result<int64_t> correct = int64_t{0};
  if (s_->rollouts) correct = s_->rollouts->greedy_correct(s_->eval_share);
  MS_RETURN_IF_ERROR(comm::agree(world, correct.status(), "the held-out evaluation"));
  std::vector<double> count = {static_cast<double>(*correct)};
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(world, count));
  const double accuracy = count[0] / static_cast<double>(s_->eval_prompts.size());
  if (world.rank() != 0) return Status::OK();
  nlohmann::ordered_json j = {{"step", step}, {"heldout_accuracy", accuracy},
                              {"prompts", s_->eval_prompts.size()}};
  s_->eval_file << j.dump() << "\n" << std::flush;
  s_->log("rl: step " + std::to_string(step) + " held-out greedy accuracy " +
          std::to_string(accuracy) + " over " + std::to_string(s_->eval_prompts.size()) +
          " prompts");
  return Status::OK();
}

Result<StepMetrics> RlRun::step(int64_t step) {
  if (s_->config.rollout_ranks > 0) return split_step(step);
  StepRollouts rollouts;
  if (s_->async) {
    MS_ASSIGN_OR_RETURN(rollouts, s_->async->take(step));
  } else {
    MS_RETURN_IF_ERROR(s_->refresh_rollout_model());
    // Under tp the tp group pools its ranks' groups, its dp rank's share.
    const size_t share = static_cast<size_t>(s_->config.prompts_per_step) /
                         static_cast<size_t>(s_->dp->size());
    RolloutSide side{s_->config,      *s_->world,       s_->dp,         s_->tp_group.get(),
                     share * static_cast<size_t>(s_->dp->rank()),
                     s_->rollouts.get(), s_->actor.get(), s_->gen_index, s_->gen_count,
                     s_->stream,      s_->pad};
    MS_ASSIGN_OR_RETURN(rollouts, generate_step_rollouts(side, step, step - 1));
  }
  s_->rollout_stale = true;  // the weights this step's update writes
  const ReshardReport reshard = std::exchange(s_->unreported_reshard, {});
  MS_ASSIGN_OR_RETURN(StepMetrics m, update(rollouts));
  if (s_->reshards()) MS_RETURN_IF_ERROR(record_reshard(*s_->world, reshard, m));
  if (s_->async) {
    s_->stream = std::move(rollouts.stream_after);  // what a checkpoint after this step resumes
    s_->async->publish(step);
  }
  return m;
}

Result<StepMetrics> RlRun::split_step(int64_t step) {
  State& s = *s_;
  const int64_t next = step + 1;
  const bool more = next <= s.config.steps;
  if (!s.trains) {
    RolloutSide side{s.config, *s.rollout_group, nullptr, nullptr, 0, s.rollouts.get(),
                     nullptr,  s.gen_index,      s.gen_count, s.stream, s.pad};
    Result<StepRollouts> mine = generate_step_rollouts(side, step, s.version_for(step));
    if (mine.ok()) {
      // The behavior log-probs of this rank's kept groups, under the weights that generated
      // them, travel with the rollouts: the trainers, which hold other weights by now, need
      // not recompute them.
      mine->stream_after = s.stream;
      const size_t share = static_cast<size_t>(s.config.prompts_per_step) /
                           static_cast<size_t>(s.gen_count);
      const size_t first = share * static_cast<size_t>(s.gen_index);
      keep_trained_share(*mine, first, share, first);
      Status done = evaluate_behavior(*mine, s.rollout_model.get(), *s.rollout_group,
                                      *s.rollout_group, s.pad);
      if (done.ok()) {
        attach_behavior(*mine);
        done = record_reshard(*s.rollout_group, std::exchange(s.unreported_reshard, {}),
                              mine->metrics);
      }
      if (!done.ok()) mine = done;
    }
    MS_ASSIGN_OR_RETURN(const StepRollouts handed,
                        hand_off_step_rollouts(*s.world, s.first_rollout_rank, mine));
    if (more) MS_RETURN_IF_ERROR(publish(s.version_for(next)));
    return handed.metrics;
  }
  Stopwatch wait;
  MS_ASSIGN_OR_RETURN(StepRollouts r,
                      hand_off_step_rollouts(*s.world, s.first_rollout_rank, StepRollouts{}));
  r.metrics.waited = true;
  r.metrics.rollout_wait_s = wait.elapsed_s();
  // With k > 0 the next step's weights are already here: the rollout ranks generate with them
  // during this update.
  if (more && s.staleness > 0) MS_RETURN_IF_ERROR(publish(s.version_for(next)));
  s.stream = r.stream_after;  // what a checkpoint after this step resumes from
  const size_t share =
      static_cast<size_t>(s.config.prompts_per_step) / static_cast<size_t>(s.dp->size());
  keep_trained_share(r, share * static_cast<size_t>(s.dp->rank()), share, 0);
  collect_behavior(r);
  // Later steps read the weights this update overwrites.
  if (s.staleness > 0) s.held[s.actor_version] = copy_weights(*s.actor);
  MS_ASSIGN_OR_RETURN(StepMetrics m, update(r));
  s.actor_version = step;
  s.held.erase(s.held.begin(), s.held.lower_bound(s.version_for(next)));
  if (more && s.staleness == 0) MS_RETURN_IF_ERROR(publish(s.version_for(next)));
  return m;
}

bool RlRun::evaluates_after(int64_t step) const {
  const RlConfig& c = s_->config;
  return c.eval_every > 0 && step % c.eval_every == 0 && step != c.steps;
}

Status RlRun::publish(int64_t version) {
  if (version == s_->sent_version) return Status::OK();
  MS_RETURN_IF_ERROR(s_->send_version(version));
  if (version > s_->start_step && evaluates_after(version)) return evaluate(version);
  return Status::OK();
}

// The per-token signal: GRPO and DAPO spread each response's group-normalised advantage over
// its tokens; PPO and VAPO score the outcome reward at each response's last token, take the
// critic's values at rollout time, and run GAE (VAPO's decoupled, length-adaptive form), the
// advantages then whitened over every rank's tokens as verl whitens its batch. In value
// pretraining steps the critic's targets are the Monte-Carlo returns and there are no
// advantages. Collective over dp.
Result<RlRun::TokenTargets> RlRun::token_targets(const StepRollouts& r,
                                                 const ResponseLayout& layout,
                                                 std::span<const Sample* const> samples,
                                                 bool value_warmup) {
  const RlConfig& c = s_->config;
  comm::Communicator& dp = *s_->dp;
  TokenTargets out;
  if (!has_critic(c.algorithm)) {
    std::vector<double> scores;
    for (const Rollout* x : r.kept) scores.push_back(x->reward);
    MS_ASSIGN_OR_RETURN(const std::vector<double> per_response,
                        group_normalized_advantages(scores, c.group_size, {c.epsilon, true}));
    MS_ASSIGN_OR_RETURN(out.advantages, broadcast_to_tokens(layout, per_response));
    return out;
  }
  const Status local = [&]() -> Status {
    MS_ASSIGN_OR_RETURN(out.old_values,
                        s_->critic->values(samples, kPolicyMicroBatch, s_->pad));
    std::vector<double> rewards(static_cast<size_t>(layout.num_tokens()), 0.0);
    std::vector<double> lambdas;
    for (int64_t i = 0; i < layout.num_responses(); ++i) {
      const int64_t length = layout.length(i);
      if (length > 0) {
        rewards[static_cast<size_t>(layout.end(i) - 1)] = r.kept[static_cast<size_t>(i)]->reward;
      }
      lambdas.push_back(c.algorithm == Algorithm::kVapo
                            ? length_adaptive_lambda(length, c.lambda_alpha)
                            : c.lambda);
    }
    if (value_warmup) {
      MS_ASSIGN_OR_RETURN(out.returns, monte_carlo_returns(layout, rewards, c.gamma));
      return Status::OK();
    }
    AdvantagesAndReturns gae_out;
    if (c.algorithm == Algorithm::kVapo) {
      MS_ASSIGN_OR_RETURN(gae_out, decoupled_gae(layout, rewards, out.old_values, c.gamma,
                                                 /*critic_lambda=*/1.0, lambdas));
    } else {
      MS_ASSIGN_OR_RETURN(gae_out, gae(layout, rewards, out.old_values, c.gamma, lambdas));
    }
    out.advantages = std::move(gae_out.advantages);
    out.returns = std::move(gae_out.returns);
    return Status::OK();
  }();
  MS_RETURN_IF_ERROR(comm::agree(*s_->trainers, local, "the critic's values and the advantages"));
  if (value_warmup) return out;
  // Mean, then the unbiased variance, over every rank's tokens.
  std::vector<double> sums = {static_cast<double>(out.advantages.size()), 0.0};
  for (double a : out.advantages) sums[1] += a;
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(dp, sums));
  const double n = sums[0];
  if (n < 2.0) return out;  // nothing to normalise: at most one response token in the step
  const double mean = sums[1] / n;
  std::vector<double> squares = {0.0};
  for (double a : out.advantages) squares[0] += (a - mean) * (a - mean);
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(dp, squares));
  out.advantages = whiten_with(out.advantages, mean, squares[0] / n * (n / (n - 1.0)));
  return out;
}


// The update half of a step: the per-token signal, then for each epoch and mini-batch of whole
// groups one actor update and, with a critic, one critic update (in value pretraining steps,
// PPO/VAPO's critic.warmup_steps, only the critic's). The loss weights carry the global token
// and response counts of each mini-batch (aggregation.h), so after the optimizer's gradient
// average every update equals one rank's on the whole mini-batch.
Result<StepMetrics> RlRun::update(const StepRollouts& r) {
  const RlConfig& c = s_->config;
  comm::Communicator& dp = *s_->dp;
  const size_t G = static_cast<size_t>(c.group_size);
  StepMetrics m = r.metrics;
  m.weight_version = r.weight_version;
  const bool critic = has_critic(c.algorithm);
  const bool value_warmup =
      critic && r.step <= c.critic_warmup_steps && s_->value_warmup_ended == 0;
  const std::vector<Rollout*>& kept = r.kept;
  std::vector<const Sample*> samples;
  for (const Rollout* x : kept) samples.push_back(&x->sample);
  Result<ResponseLayout> whole = response_layout(samples);
  MS_RETURN_IF_ERROR(comm::agree(*s_->trainers, whole.status(), "the rollouts' layout"));
  MS_ASSIGN_OR_RETURN(const TokenTargets targets,
                      token_targets(r, *whole, samples, value_warmup));
  PolicyEval reference;
  if (c.kl_coef > 0.0 && !value_warmup) {
    Result<PolicyEval> ref =
        evaluate_policy(*s_->reference.model, samples, kPolicyMicroBatch, s_->pad);
    MS_RETURN_IF_ERROR(comm::agree(*s_->trainers, ref.status(), "the reference model's log-probs"));
    reference = std::move(*ref);
  }
  if (critic) {
    MS_RETURN_IF_ERROR(record_value_statistics(dp, targets.old_values, targets.returns, m));
  }
  // Every update of the step at its rate: a pure function of the step, so a resumed run
  // continues the schedule.
  m.lr = train::learning_rate(c.optimizer, r.step, c.steps);

  // Updates: mini-batches of whole groups.
  Stopwatch update_clock;
  const size_t groups = r.batch.kept.size();
  std::vector<size_t> token_offset(kept.size() + 1, 0);
  for (size_t i = 0; i < kept.size(); ++i) {
    token_offset[i + 1] = token_offset[i] + kept[i]->sample.response.size();
  }
  for (int64_t epoch = 0; epoch < c.epochs; ++epoch) {
    for (int64_t mb = 0; mb < c.mini_batches; ++mb) {
      const size_t g0 = groups * static_cast<size_t>(mb) / static_cast<size_t>(c.mini_batches);
      const size_t g1 = groups * static_cast<size_t>(mb + 1) / static_cast<size_t>(c.mini_batches);
      if (g0 == g1) continue;
      MiniBatch batch;
      batch.r0 = r.before[g0] * G;
      batch.r1 = r.before[g1] * G;
      batch.samples = std::span<const Sample* const>(samples).subspan(batch.r0,
                                                                       batch.r1 - batch.r0);
      batch.t0 = token_offset[batch.r0];
      batch.t1 = token_offset[batch.r1];
      // The mini-batch's global token, response and positive-response token counts.
      std::vector<double> counts(3, 0.0);
      for (size_t i = batch.r0; i < batch.r1; ++i) {
        const double tokens = static_cast<double>(kept[i]->sample.response.size());
        counts[0] += tokens;
        counts[1] += tokens > 0.0 ? 1.0 : 0.0;
        if (kept[i]->reward > 0.0) counts[2] += tokens;
      }
      MS_RETURN_IF_ERROR(train::sum_in_rank_order(dp, counts));
      batch.tokens = counts[0];
      batch.positive_tokens = static_cast<int64_t>(counts[2]);
      batch.scope = AggregationScope{c.loss_agg, static_cast<int64_t>(counts[0]),
                                     static_cast<int64_t>(counts[1]),
                                     static_cast<double>(c.max_tokens), dp.size()};
      if (!value_warmup) MS_RETURN_IF_ERROR(update_actor(r, batch, targets, reference, m));
      if (critic) MS_RETURN_IF_ERROR(update_critic(r.step, batch, targets, m));
    }
  }
  const double updates = static_cast<double>(std::max<int64_t>(m.updates, 1));
  m.clip_fraction /= updates;
  m.dual_clip_fraction /= updates;
  m.policy_kl /= updates;
  m.ref_kl /= updates;
  m.loss /= updates;
  m.grad_norm /= updates;
  const double critic_updates = static_cast<double>(std::max<int64_t>(m.critic_updates, 1));
  m.value_loss /= critic_updates;
  m.value_clip_fraction /= critic_updates;
  m.critic_grad_norm /= critic_updates;
  m.update_s = update_clock.elapsed_s();
  if (value_warmup && r.step < c.critic_warmup_steps &&
      m.explained_variance >= c.critic_warmup_until_ev) {
    s_->value_warmup_ended = r.step;
    s_->log("rl: value pretraining ends after step " + std::to_string(r.step) +
            ": explained variance " + std::to_string(m.explained_variance) + " >= " +
            std::to_string(c.critic_warmup_until_ev) +
            " (critic.warmup_until_explained_variance); the actor trains from the next step");
  }
  return m;
}

// One actor update on a mini-batch: the current policy's log-probs, the clipped loss against
// the behavior policy's (plus k3 KL and VAPO's positive-example NLL when on), one backward and
// one optimizer step. Adds the update's figures to m.
Status RlRun::update_actor(const StepRollouts& r, const MiniBatch& batch,
                           const TokenTargets& targets, const PolicyEval& reference,
                           StepMetrics& m) {
  const RlConfig& c = s_->config;
  comm::Communicator& dp = *s_->dp;
  const size_t t0 = batch.t0, n = batch.t1 - batch.t0;
  // Token sums of: loss, clipped, dual-clipped, policy KL, reference KL.
  std::vector<double> sums(5, 0.0);
  s_->optimizer->begin_step();
  const Status local = [&]() -> Status {
    MS_ASSIGN_OR_RETURN(const ResponseLayout layout, response_layout(batch.samples));
    MS_ASSIGN_OR_RETURN(const PolicyEval current,
                        evaluate_policy(*s_->actor, batch.samples, kPolicyMicroBatch, s_->pad));
    const std::span<const double> old_lp(r.behavior.log_probs.data() + t0, n);
    const std::span<const double> token_adv(targets.advantages.data() + t0, n);
    MS_ASSIGN_OR_RETURN(LossResult policy,
                        clipped_policy_loss(layout, current.log_probs, old_lp, token_adv, c.clip,
                                            batch.scope));
    const auto add = [&](const LossResult& term) {
      sums[0] += term.loss;
      for (size_t k = 0; k < policy.gradient.size(); ++k) policy.gradient[k] += term.gradient[k];
    };
    sums[0] = policy.loss;
    sums[1] = policy.clip_fraction * static_cast<double>(n);
    sums[2] = policy.dual_clip_fraction * static_cast<double>(n);
    sums[3] = policy.kl * static_cast<double>(n);
    if (c.kl_coef > 0.0) {
      const std::span<const double> ref_lp(reference.log_probs.data() + t0, n);
      MS_ASSIGN_OR_RETURN(const LossResult kl, k3_kl_loss(layout, current.log_probs, ref_lp,
                                                          c.kl_coef, batch.scope));
      add(kl);
      sums[4] = kl.kl * static_cast<double>(n);
    }
    if (c.positive_nll_coef > 0.0 && batch.positive_tokens > 0) {
      std::vector<double> positive;
      for (size_t i = batch.r0; i < batch.r1; ++i) {
        positive.push_back(r.kept[i]->reward > 0.0 ? 1.0 : 0.0);
      }
      MS_ASSIGN_OR_RETURN(const LossResult nll,
                          positive_nll_loss(layout, current.log_probs, positive,
                                            c.positive_nll_coef, batch.positive_tokens,
                                            dp.size()));
      add(nll);
    }
    return backward_policy(*s_->actor, batch.samples, policy.gradient, kPolicyMicroBatch,
                           s_->pad);
  }();
  MS_RETURN_IF_ERROR(comm::agree(*s_->trainers, local, "the policy update"));
  MS_ASSIGN_OR_RETURN(const double norm, apply_update(*s_->optimizer, c.optimizer, m.lr));
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(dp, sums));
  // Each rank's loss carries the factor dp that the gradient average removes (aggregation.h).
  m.loss += sums[0] / static_cast<double>(dp.size());
  if (batch.tokens > 0.0) {
    m.clip_fraction += sums[1] / batch.tokens;
    m.dual_clip_fraction += sums[2] / batch.tokens;
    m.policy_kl += sums[3] / batch.tokens;
    m.ref_kl += sums[4] / batch.tokens;
  }
  m.grad_norm += norm;
  ++m.updates;
  return Status::OK();
}

// One critic update on a mini-batch: its current values, the clipped value loss against the
// returns (clipped around the values at rollout time), one backward and one step of its own
// optimizer at critic.lr on the actor's schedule. Adds the update's figures to m.
Status RlRun::update_critic(int64_t step, const MiniBatch& batch, const TokenTargets& targets,
                            StepMetrics& m) {
  const RlConfig& c = s_->config;
  comm::Communicator& dp = *s_->dp;
  const config::OptimConfig optim = critic_optimizer(c);
  const size_t t0 = batch.t0, n = batch.t1 - batch.t0;
  std::vector<double> sums(2, 0.0);  // value loss, clipped tokens
  s_->critic_optimizer->begin_step();
  const Status local = [&]() -> Status {
    MS_ASSIGN_OR_RETURN(const ResponseLayout layout, response_layout(batch.samples));
    MS_ASSIGN_OR_RETURN(const std::vector<double> values,
                        s_->critic->values(batch.samples, kPolicyMicroBatch, s_->pad));
    MS_ASSIGN_OR_RETURN(const LossResult value,
                        value_loss(layout, values, std::span(targets.old_values).subspan(t0, n),
                                   std::span(targets.returns).subspan(t0, n), c.value_clip,
                                   batch.scope));
    sums[0] = value.loss;
    sums[1] = value.clip_fraction * static_cast<double>(n);
    return s_->critic->backward(batch.samples, value.gradient, kPolicyMicroBatch, s_->pad);
  }();
  MS_RETURN_IF_ERROR(comm::agree(*s_->trainers, local, "the critic update"));
  MS_ASSIGN_OR_RETURN(const double norm,
                      apply_update(*s_->critic_optimizer, optim,
                                   train::learning_rate(optim, step, c.steps)));
  MS_RETURN_IF_ERROR(train::sum_in_rank_order(dp, sums));
  m.value_loss += sums[0] / static_cast<double>(dp.size());
  if (batch.tokens > 0.0) m.value_clip_fraction += sums[1] / batch.tokens;
  m.critic_grad_norm += norm;
  ++m.critic_updates;
  return Status::OK();
}

Result<StepMetrics> RlRun::run() {
  const RlConfig& c = s_->config;
  StepMetrics last;
  last.step = s_->start_step;
  if (s_->start_step >= c.steps) {
    s_->log("rl: the checkpoint is at step " + std::to_string(s_->start_step) +
            ", train.steps is " + std::to_string(c.steps) + ": nothing left to do");
    return last;
  }
  const bool split = c.rollout_ranks > 0;
  if (s_->start_step == 0) MS_RETURN_IF_ERROR(evaluate(0));
  for (int64_t i = s_->start_step + 1; i <= c.steps; ++i) {
    Stopwatch clock;
    MS_ASSIGN_OR_RETURN(last, step(i));
    if (s_->world->rank() == 0) {
      s_->steps_file << step_metrics_json(last) << "\n" << std::flush;
      if (!s_->steps_file) return IOError("writing " + c.run_dir + "/rl_steps.jsonl failed");
    }
    // A rollout-only rank: no update, no telemetry or checkpoint of its own.
    if (!s_->trains) continue;
    telemetry::StepRecord record;
    record.step = i;
    record.loss = last.loss;
    record.grad_norm = last.grad_norm;
    record.lr = last.lr;
    record.step_s = clock.elapsed_s();
    record.tokens_per_s = static_cast<double>(last.response_tokens) / record.step_s;
    record.phases.fwd_s = last.rollout_s;
    record.phases.optim_s = last.update_s;
    MS_RETURN_IF_ERROR(s_->telemetry->write_step(record));
    char line[320];
    std::snprintf(line, sizeof line,
                  "rl: step %lld reward %.3f acc %.3f len %.1f entropy %.3f clip %.3f kl %.4f "
                  "groups %lld kept %lld dropped tokens/forward %.2f rollout %.2fs update %.2fs",
                  static_cast<long long>(i), last.mean_reward, last.accuracy,
                  last.response_length, last.entropy, last.clip_fraction, last.policy_kl,
                  static_cast<long long>(last.kept_groups),
                  static_cast<long long>(last.dropped_groups), last.tokens_per_forward,
                  last.rollout_s, last.update_s);
    std::string text = line;
    if (last.critic_updates > 0) {
      std::snprintf(line, sizeof line, " value loss %.4f value %.3f return %.3f explained %.3f%s",
                    last.value_loss, last.value_mean, last.return_mean, last.explained_variance,
                    last.updates == 0 ? " (value pretraining)" : "");
      text += line;
    }
    s_->log(text);
    // Split placement evaluates each version as the rollout ranks receive it (publish).
    if (!split && evaluates_after(i)) MS_RETURN_IF_ERROR(evaluate(i));
    if (c.checkpoint_every > 0 && i % c.checkpoint_every == 0 && i != c.steps) {
      MS_RETURN_IF_ERROR(s_->save_checkpoint(i));
    }
  }
  if (split) {
    // The evaluations of the versions the rollout ranks have not received yet (with k > 0,
    // the last k steps'), and of the final weights.
    for (int64_t v = std::max(s_->sent_version, s_->start_step) + 1; v <= c.steps; ++v) {
      if (!evaluates_after(v) && v != c.steps) continue;
      MS_RETURN_IF_ERROR(s_->send_version(v));
      MS_RETURN_IF_ERROR(evaluate(v));
    }
  } else {
    MS_RETURN_IF_ERROR(evaluate(c.steps));
  }
  if (!s_->trains) return last;
  MS_RETURN_IF_ERROR(s_->save_checkpoint(c.steps));
  MS_RETURN_IF_ERROR(s_->telemetry->close());
  return last;
}

}  // namespace ms::rl
