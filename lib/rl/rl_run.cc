#include "rl/rl_run.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "core/timer.h"
#include "infer/model_loader.h"
#include "io/env.h"
#include "model/transformer.h"
#include "rl/actor.h"
#include "rl/advantage.h"
#include "rl/dynamic_sampling.h"
#include "rl/losses.h"
#include "rl/rollout.h"
#include "telemetry/writer.h"
#include "train/distributed_optimizer.h"
#include "train/run_dir.h"

namespace ms::rl {
namespace {

constexpr int64_t kMicroBatch = 8;  // samples per forward (bounds the (B, T, vocab) logits)

std::string hostname() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

}  // namespace

struct RlRun::State {
  RlConfig config;
  comm::Communicator* dp = nullptr;
  std::function<void(const std::string&)> log;
  std::optional<io::DirectoryLock> lock;
  infer::LoadedModel reference;  // the checkpoint as loaded: the frozen reference for KL
  std::unique_ptr<model::Transformer> actor;
  std::unique_ptr<train::DistributedOptimizer> optimizer;
  std::vector<PromptExample> prompts, eval_prompts;
  std::unique_ptr<RolloutGenerator> rollouts;
  std::unique_ptr<telemetry::TelemetryWriter> telemetry;
  std::ofstream steps_file, eval_file;
  std::vector<size_t> order;  // shuffled prompt order
  size_t cursor = 0;
  std::mt19937_64 shuffle_rng;
  int32_t pad = 0;

  std::vector<size_t> next_prompts(int64_t n) {
    std::vector<size_t> out;
    for (int64_t i = 0; i < n; ++i) {
      if (cursor == order.size()) {
        std::shuffle(order.begin(), order.end(), shuffle_rng);
        cursor = 0;
      }
      out.push_back(order[cursor++]);
    }
    return out;
  }
};

std::string step_metrics_json(const StepMetrics& m) {
  nlohmann::ordered_json j = {
      {"step", m.step}, {"mean_reward", m.mean_reward}, {"accuracy", m.accuracy},
      {"response_length", m.response_length}, {"entropy", m.entropy},
      {"clip_fraction", m.clip_fraction}, {"dual_clip_fraction", m.dual_clip_fraction},
      {"policy_kl", m.policy_kl}, {"ref_kl", m.ref_kl}, {"loss", m.loss},
      {"grad_norm", m.grad_norm}, {"kept_groups", m.kept_groups},
      {"dropped_groups", m.dropped_groups}, {"rounds", m.rounds},
      {"response_tokens", m.response_tokens}, {"updates", m.updates},
      {"rollout_s", m.rollout_s}, {"update_s", m.update_s}};
  return j.dump();
}

RlRun::RlRun(std::unique_ptr<State> state) : s_(std::move(state)) {}
RlRun::~RlRun() = default;

Result<std::unique_ptr<RlRun>> RlRun::create(const RlConfig& config, comm::Communicator& dp,
                                             std::function<void(const std::string&)> log) {
  if (dp.size() != 1) {
    return InvalidArgument("ms-train rl runs on one rank for now; got " +
                           std::to_string(dp.size()) + " (docs/rl.md: what is not built yet)");
  }
  auto s = std::make_unique<State>();
  s->config = config;
  s->dp = &dp;
  s->log = std::move(log);
  MS_ASSIGN_OR_RETURN(io::DirectoryLock lock, train::lock_run_directory(config.run_dir));
  s->lock.emplace(std::move(lock));
  MS_ASSIGN_OR_RETURN(s->prompts, read_prompt_dataset(config.train_prompts));
  if (!config.eval_prompts.empty()) {
    MS_ASSIGN_OR_RETURN(s->eval_prompts, read_prompt_dataset(config.eval_prompts));
    if (config.eval_limit > 0 && static_cast<int64_t>(s->eval_prompts.size()) > config.eval_limit) {
      s->eval_prompts.resize(static_cast<size_t>(config.eval_limit));
    }
  }
  MS_ASSIGN_OR_RETURN(s->reference, infer::load_model(config.model_dir, config.checkpoint));
  if (!s->reference.tokenizer) {
    return InvalidArgument("the actor has no tokenizer.json beside its weights");
  }
  // The actor: a training model (gradients, kRandom layout) with the loaded values copied in.
  const config::ModelConfig& mc = s->reference.model->config();
  MS_ASSIGN_OR_RETURN(s->actor, model::Transformer::create(mc, config.seed));
  auto& dst = s->actor->parameters();
  const auto& src = s->reference.model->parameters();
  if (dst.size() != src.size()) return Internal("actor and checkpoint parameter tables differ");
  for (size_t i = 0; i < dst.size(); ++i) {
    if (dst[i].name != src[i].name || dst[i].value.numel() != src[i].value.numel()) {
      return Internal("actor parameter " + dst[i].name + " does not match the checkpoint's");
    }
    std::copy_n(src[i].value.data<float>(), src[i].value.numel(), dst[i].value.data<float>());
  }
  if (config.kl_coef == 0.0) s->reference.model.reset();  // no reference model needed
  std::vector<train::TrainableParam> params;
  for (model::Parameter& p : dst) {
    if (!p.trainable) continue;
    params.push_back({p.name, &p.value, &p.grad, p.weight_decay, true, true});
  }
  train::DistributedOptimizerOptions options;
  options.overlap = false;
  MS_ASSIGN_OR_RETURN(s->optimizer,
                      train::DistributedOptimizer::create(dp, std::move(params), config.optimizer,
                                                          options));
  // After the optimizer adopted the parameters (their values now live in its flat buffer), so
  // the engine reads exactly what each update writes.
  MS_ASSIGN_OR_RETURN(s->rollouts, RolloutGenerator::create(*s->actor, *s->reference.tokenizer,
                                                            s->config, s->prompts));
  s->pad = s->reference.tokenizer->eos_id();
  s->order.resize(s->prompts.size());
  std::iota(s->order.begin(), s->order.end(), size_t{0});
  s->shuffle_rng.seed(config.seed);
  std::shuffle(s->order.begin(), s->order.end(), s->shuffle_rng);
  MS_ASSIGN_OR_RETURN(s->telemetry, telemetry::TelemetryWriter::open(config.run_dir, 0, hostname(),
                                                                     telemetry::MeshCoord{}, 0.0));
  s->steps_file.open(config.run_dir + "/rl_steps.jsonl", std::ios::app);
  s->eval_file.open(config.run_dir + "/rl_eval.jsonl", std::ios::app);
  if (!s->steps_file || !s->eval_file) {
    return IOError("cannot open rl_steps.jsonl / rl_eval.jsonl in " + config.run_dir);
  }
  s->log("rl: " + std::string(algorithm_name(config.algorithm)) + ", " +
         std::to_string(s->prompts.size()) + " prompts, G = " + std::to_string(config.group_size) +
         ", " + std::to_string(config.prompts_per_step) + " groups per step, loss " +
         std::string(loss_aggregation_name(config.loss_agg)) + ", actor " +
         std::to_string(s->actor->parameter_count()) + " parameters");
  return std::unique_ptr<RlRun>(new RlRun(std::move(s)));
}

Status RlRun::evaluate(int64_t step) {
  if (s_->eval_prompts.empty()) return Status::OK();
  MS_ASSIGN_OR_RETURN(const double accuracy, s_->rollouts->greedy_accuracy(s_->eval_prompts));
  nlohmann::ordered_json j = {{"step", step}, {"heldout_accuracy", accuracy},
                              {"prompts", s_->eval_prompts.size()}};
  s_->eval_file << j.dump() << "\n" << std::flush;
  s_->log("rl: step " + std::to_string(step) + " held-out greedy accuracy " +
          std::to_string(accuracy) + " over " + std::to_string(s_->eval_prompts.size()) +
          " prompts");
  return Status::OK();
}

Result<StepMetrics> RlRun::step(int64_t step) {
  const RlConfig& c = s_->config;
  StepMetrics m;
  m.step = step;
  Stopwatch rollout_clock;
  // Rollouts, with dynamic sampling's rounds when on.
  std::vector<std::vector<RolloutGroup>> rounds;
  MS_ASSIGN_OR_RETURN(
      const FilledBatch batch,
      fill_batch(c.prompts_per_step, c.dynamic_sampling ? c.max_rounds : 1, c.dynamic_sampling,
                 "algorithm.max_rounds",
                 [&](int64_t round) -> Result<std::vector<std::vector<double>>> {
                   const std::vector<size_t> prompts = s_->next_prompts(c.prompts_per_step);
                   const uint64_t seed = c.seed * 0x9e3779b97f4a7c15ULL +
                                         static_cast<uint64_t>(step) * 1000 +
                                         static_cast<uint64_t>(round);
                   MS_ASSIGN_OR_RETURN(std::vector<RolloutGroup> groups,
                                       s_->rollouts->sample_groups(prompts, seed));
                   std::vector<std::vector<double>> rewards;
                   for (const RolloutGroup& g : groups) {
                     std::vector<double> r;
                     for (const Rollout& x : g) r.push_back(x.reward);
                     rewards.push_back(std::move(r));
                   }
                   rounds.push_back(std::move(groups));
                   return rewards;
                 }));
  m.kept_groups = static_cast<int64_t>(batch.kept.size());
  m.dropped_groups = batch.dropped;
  m.rounds = batch.rounds;
  // Every generated response counts in the reward and accuracy figures (what the policy does),
  // the kept ones in training.
  int64_t generated = 0;
  for (const auto& round : rounds) {
    for (const RolloutGroup& g : round) {
      for (const Rollout& r : g) {
        m.mean_reward += r.reward;
        m.accuracy += r.correct;
        m.response_length += static_cast<double>(r.sample.response.size());
        ++generated;
      }
    }
  }
  m.mean_reward /= static_cast<double>(generated);
  m.accuracy /= static_cast<double>(generated);
  m.response_length /= static_cast<double>(generated);
  std::vector<const Rollout*> kept;
  std::vector<double> scores;
  for (const GroupRef& ref : batch.kept) {
    for (const Rollout& r : rounds[static_cast<size_t>(ref.round)][static_cast<size_t>(ref.index)]) {
      kept.push_back(&r);
      scores.push_back(r.reward);
    }
  }
  MS_ASSIGN_OR_RETURN(const std::vector<double> advantages,
                      group_normalized_advantages(scores, c.group_size, {c.epsilon, true}));
  std::vector<const Sample*> samples;
  for (const Rollout* r : kept) samples.push_back(&r->sample);
  MS_ASSIGN_OR_RETURN(const PolicyEval old_policy,
                      evaluate_policy(*s_->actor, samples, kMicroBatch, s_->pad));
  PolicyEval reference;
  if (c.kl_coef > 0.0) {
    MS_ASSIGN_OR_RETURN(reference, evaluate_policy(*s_->reference.model, samples, kMicroBatch, s_->pad));
  }
  m.rollout_s = rollout_clock.elapsed_s();
  if (!old_policy.entropy.empty()) {
    m.entropy = std::accumulate(old_policy.entropy.begin(), old_policy.entropy.end(), 0.0) /
                static_cast<double>(old_policy.entropy.size());
  }
  m.response_tokens = static_cast<int64_t>(old_policy.log_probs.size());

  // Updates: mini-batches of whole groups.
  Stopwatch update_clock;
  const size_t G = static_cast<size_t>(c.group_size);
  const size_t groups = kept.size() / G;
  std::vector<size_t> token_offset(kept.size() + 1, 0);
  for (size_t i = 0; i < kept.size(); ++i) {
    token_offset[i + 1] = token_offset[i] + kept[i]->sample.response.size();
  }
  for (int64_t epoch = 0; epoch < c.epochs; ++epoch) {
    for (int64_t mb = 0; mb < c.mini_batches; ++mb) {
      const size_t g0 = groups * static_cast<size_t>(mb) / static_cast<size_t>(c.mini_batches);
      const size_t g1 = groups * static_cast<size_t>(mb + 1) / static_cast<size_t>(c.mini_batches);
      const size_t r0 = g0 * G, r1 = g1 * G;
      if (r0 == r1) continue;
      const std::span<const Sample* const> mb_samples(samples.data() + r0, r1 - r0);
      const size_t t0 = token_offset[r0], t1 = token_offset[r1];
      MS_ASSIGN_OR_RETURN(const ResponseLayout layout, response_layout(mb_samples));
      MS_ASSIGN_OR_RETURN(const PolicyEval current,
                          evaluate_policy(*s_->actor, mb_samples, kMicroBatch, s_->pad));
      const std::span<const double> old_lp(old_policy.log_probs.data() + t0, t1 - t0);
      MS_ASSIGN_OR_RETURN(
          const std::vector<double> token_adv,
          broadcast_to_tokens(layout, std::span(advantages.data() + r0, r1 - r0)));
      AggregationScope scope{c.loss_agg, 0, 0, static_cast<double>(c.max_tokens), 1};
      MS_ASSIGN_OR_RETURN(LossResult policy,
                          clipped_policy_loss(layout, current.log_probs, old_lp, token_adv,
                                              c.clip, scope));
      m.clip_fraction += policy.clip_fraction;
      m.dual_clip_fraction += policy.dual_clip_fraction;
      m.policy_kl += policy.kl;
      if (c.kl_coef > 0.0) {
        const std::span<const double> ref_lp(reference.log_probs.data() + t0, t1 - t0);
        MS_ASSIGN_OR_RETURN(const LossResult kl,
                            k3_kl_loss(layout, current.log_probs, ref_lp, c.kl_coef, scope));
        policy.loss += kl.loss;
        for (size_t k = 0; k < policy.gradient.size(); ++k) policy.gradient[k] += kl.gradient[k];
        m.ref_kl += kl.kl;
      }
      m.loss += policy.loss;
      s_->optimizer->begin_step();
      MS_RETURN_IF_ERROR(backward_policy(*s_->actor, mb_samples, policy.gradient, kMicroBatch, s_->pad));
      MS_RETURN_IF_ERROR(s_->optimizer->finish_reduction());
      MS_ASSIGN_OR_RETURN(const double norm, s_->optimizer->grad_norm());
      const double clip = c.optimizer.grad_clip > 0.0 && norm > c.optimizer.grad_clip
                              ? c.optimizer.grad_clip / (norm + 1e-6)
                              : 1.0;
      MS_RETURN_IF_ERROR(s_->optimizer->apply(c.optimizer.lr, clip));
      m.grad_norm += norm;
      ++m.updates;
    }
  }
  const double updates = static_cast<double>(std::max<int64_t>(m.updates, 1));
  m.clip_fraction /= updates;
  m.dual_clip_fraction /= updates;
  m.policy_kl /= updates;
  m.ref_kl /= updates;
  m.loss /= updates;
  m.grad_norm /= updates;
  m.update_s = update_clock.elapsed_s();
  return m;
}

Result<StepMetrics> RlRun::run() {
  const RlConfig& c = s_->config;
  MS_RETURN_IF_ERROR(evaluate(0));
  StepMetrics last;
  for (int64_t i = 1; i <= c.steps; ++i) {
    Stopwatch clock;
    MS_ASSIGN_OR_RETURN(last, step(i));
    s_->steps_file << step_metrics_json(last) << "\n" << std::flush;
    if (!s_->steps_file) return IOError("writing " + c.run_dir + "/rl_steps.jsonl failed");
    telemetry::StepRecord record;
    record.step = i;
    record.loss = last.loss;
    record.grad_norm = last.grad_norm;
    record.lr = c.optimizer.lr;
    record.step_s = clock.elapsed_s();
    record.tokens_per_s = static_cast<double>(last.response_tokens) / record.step_s;
    record.phases.fwd_s = last.rollout_s;
    record.phases.optim_s = last.update_s;
    MS_RETURN_IF_ERROR(s_->telemetry->write_step(record));
    char line[320];
    std::snprintf(line, sizeof line,
                  "rl: step %lld reward %.3f acc %.3f len %.1f entropy %.3f clip %.3f kl %.4f "
                  "groups %lld kept %lld dropped rollout %.2fs update %.2fs",
                  static_cast<long long>(i), last.mean_reward, last.accuracy,
                  last.response_length, last.entropy, last.clip_fraction, last.policy_kl,
                  static_cast<long long>(last.kept_groups),
                  static_cast<long long>(last.dropped_groups), last.rollout_s, last.update_s);
    s_->log(line);
    if (c.eval_every > 0 && i % c.eval_every == 0 && i != c.steps) MS_RETURN_IF_ERROR(evaluate(i));
  }
  MS_RETURN_IF_ERROR(evaluate(c.steps));
  MS_RETURN_IF_ERROR(s_->telemetry->close());
  return last;
}

}  // namespace ms::rl
