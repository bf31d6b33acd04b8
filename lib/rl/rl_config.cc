#include "rl/rl_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "io/atomic_file.h"

namespace ms::rl {
namespace {

// Reads one scalar key of a section into `out`; InvalidArgument naming section.key.
template <typename T>
Status read_scalar(const YAML::Node& node, const std::string& key, T& out) {
  try {
    out = node.as<T>();
  } catch (const YAML::Exception&) {
    return InvalidArgument(key + ": '" + (node.IsScalar() ? node.Scalar() : std::string("?")) +
                           "' is not a valid value");
  }
  return Status::OK();
}

using KeyReader = std::function<Status(const YAML::Node&, const std::string& key)>;

Status positive(int64_t v, const std::string& key) {
  if (v < 1) return InvalidArgument(key + " must be at least 1, got " + std::to_string(v));
  return Status::OK();
}

}  // namespace

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kGrpo: return "grpo";
    case Algorithm::kDapo: return "dapo";
    case Algorithm::kPpo: return "ppo";
    case Algorithm::kVapo: return "vapo";
  }
  return "?";
}

config::OptimConfig critic_optimizer(const RlConfig& c) {
  config::OptimConfig o = c.optimizer;
  o.lr = c.critic_lr;
  return o;
}

Result<RlConfig> parse_rl_config(const std::string& yaml, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ": " + e.what());
  }
  if (!root.IsMap()) return InvalidArgument(source + ": expected a mapping of sections");
  RlConfig c;
  // The algorithm first: its defaults are the base the other keys override.
  if (root["algorithm"] && root["algorithm"]["name"]) {
    std::string name;
    MS_RETURN_IF_ERROR(read_scalar(root["algorithm"]["name"], "algorithm.name", name));
    if (name == "dapo") {
      c.algorithm = Algorithm::kDapo;
      c.loss_agg = LossAggregation::kTokenMean;
      c.clip = PolicyClip{0.2, 0.28, 3.0};
      c.dynamic_sampling = true;
      c.overlong_cache_len = -1;  // resolved to max_tokens / 4 below unless set
    } else if (name == "ppo") {
      c.algorithm = Algorithm::kPpo;
      c.loss_agg = LossAggregation::kTokenMean;  // verl's PPO actor and critic default
    } else if (name == "vapo") {
      // VAPO's recipe: DAPO's clip-higher and token-level loss, a length-adaptive policy
      // lambda, the positive-example loss and 50 value pretraining steps.
      c.algorithm = Algorithm::kVapo;
      c.loss_agg = LossAggregation::kTokenMean;
      c.clip = PolicyClip{0.2, 0.28, 3.0};
      c.positive_nll_coef = 0.1;
      c.critic_warmup_steps = 50;
    } else if (name != "grpo") {
      return InvalidArgument(source + ": algorithm.name must be grpo, dapo, ppo or vapo, got '" +
                             name + "'");
    }
  }
  c.optimizer.weight_decay = 0.0;
  c.optimizer.lr = 1e-5;
  c.optimizer.schedule = config::LrSchedule::kConstant;
  c.optimizer.warmup_steps = 0;
  c.optimizer.min_lr = 0.0;
  std::string loss_agg, optimizer_name, schedule, placement = "colocated";
  std::vector<double> betas;
  const std::map<std::string, std::map<std::string, KeyReader>> sections = {
      {"run", {{"dir", [&](auto& n, auto& k) { return read_scalar(n, k, c.run_dir); }},
               {"seed", [&](auto& n, auto& k) { return read_scalar(n, k, c.seed); }}}},
      {"actor", {{"checkpoint", [&](auto& n, auto& k) { return read_scalar(n, k, c.checkpoint); }},
                 {"model_dir", [&](auto& n, auto& k) { return read_scalar(n, k, c.model_dir); }}}},
      {"prompts",
       {{"train", [&](auto& n, auto& k) { return read_scalar(n, k, c.train_prompts); }},
        {"eval", [&](auto& n, auto& k) { return read_scalar(n, k, c.eval_prompts); }},
        {"train_answers", [&](auto& n, auto& k) { return read_scalar(n, k, c.train_answers); }},
        {"eval_answers", [&](auto& n, auto& k) { return read_scalar(n, k, c.eval_answers); }},
        {"eval_every", [&](auto& n, auto& k) { return read_scalar(n, k, c.eval_every); }},
        {"eval_limit", [&](auto& n, auto& k) { return read_scalar(n, k, c.eval_limit); }}}},
      {"rollout",
       {{"group_size", [&](auto& n, auto& k) { return read_scalar(n, k, c.group_size); }},
        {"prompts_per_step", [&](auto& n, auto& k) { return read_scalar(n, k, c.prompts_per_step); }},
        {"max_tokens", [&](auto& n, auto& k) { return read_scalar(n, k, c.max_tokens); }},
        {"temperature", [&](auto& n, auto& k) { return read_scalar(n, k, c.temperature); }},
        {"top_p", [&](auto& n, auto& k) { return read_scalar(n, k, c.top_p); }},
        {"stop", [&](auto& n, auto& k) { return read_scalar(n, k, c.stop); }},
        {"speculative_tokens",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.speculative_tokens); }},
        {"async_staleness",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.async_staleness); }}}},
      {"algorithm",
       {{"name", [&](auto&, auto&) { return Status::OK(); }},
        {"loss_agg", [&](auto& n, auto& k) { return read_scalar(n, k, loss_agg); }},
        {"clip_low", [&](auto& n, auto& k) { return read_scalar(n, k, c.clip.low); }},
        {"clip_high", [&](auto& n, auto& k) { return read_scalar(n, k, c.clip.high); }},
        {"dual_clip", [&](auto& n, auto& k) { return read_scalar(n, k, c.clip.dual); }},
        {"kl_coef", [&](auto& n, auto& k) { return read_scalar(n, k, c.kl_coef); }},
        {"epsilon", [&](auto& n, auto& k) { return read_scalar(n, k, c.epsilon); }},
        {"dynamic_sampling", [&](auto& n, auto& k) { return read_scalar(n, k, c.dynamic_sampling); }},
        {"max_rounds", [&](auto& n, auto& k) { return read_scalar(n, k, c.max_rounds); }},
        {"overlong_cache_len",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.overlong_cache_len); }},
        {"gamma", [&](auto& n, auto& k) { return read_scalar(n, k, c.gamma); }},
        {"lambda", [&](auto& n, auto& k) { return read_scalar(n, k, c.lambda); }},
        {"lambda_alpha", [&](auto& n, auto& k) { return read_scalar(n, k, c.lambda_alpha); }},
        {"positive_nll_coef",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.positive_nll_coef); }}}},
      {"critic",
       {{"lr", [&](auto& n, auto& k) { return read_scalar(n, k, c.critic_lr); }},
        {"value_clip", [&](auto& n, auto& k) { return read_scalar(n, k, c.value_clip); }},
        {"warmup_steps",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.critic_warmup_steps); }},
        {"warmup_until_explained_variance",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.critic_warmup_until_ev); }}}},
      {"parallel", {{"tp", [&](auto& n, auto& k) { return read_scalar(n, k, c.tp); }}}},
      {"placement",
       {{"mode", [&](auto& n, auto& k) { return read_scalar(n, k, placement); }},
        {"rollout_ranks", [&](auto& n, auto& k) { return read_scalar(n, k, c.rollout_ranks); }}}},
      {"train",
       {{"steps", [&](auto& n, auto& k) { return read_scalar(n, k, c.steps); }},
        {"mini_batches", [&](auto& n, auto& k) { return read_scalar(n, k, c.mini_batches); }},
        {"epochs", [&](auto& n, auto& k) { return read_scalar(n, k, c.epochs); }}}},
      {"optimizer",
       {{"name", [&](auto& n, auto& k) { return read_scalar(n, k, optimizer_name); }},
        {"lr", [&](auto& n, auto& k) { return read_scalar(n, k, c.optimizer.lr); }},
        {"betas", [&](auto& n, auto& k) { return read_scalar(n, k, betas); }},
        {"eps", [&](auto& n, auto& k) { return read_scalar(n, k, c.optimizer.eps); }},
        {"weight_decay", [&](auto& n, auto& k) { return read_scalar(n, k, c.optimizer.weight_decay); }},
        {"grad_clip", [&](auto& n, auto& k) { return read_scalar(n, k, c.optimizer.grad_clip); }},
        {"schedule", [&](auto& n, auto& k) { return read_scalar(n, k, schedule); }},
        {"warmup_steps",
         [&](auto& n, auto& k) { return read_scalar(n, k, c.optimizer.warmup_steps); }},
        {"min_lr", [&](auto& n, auto& k) { return read_scalar(n, k, c.optimizer.min_lr); }}}},
      {"checkpoint",
       {{"every", [&](auto& n, auto& k) { return read_scalar(n, k, c.checkpoint_every); }},
        {"keep", [&](auto& n, auto& k) { return read_scalar(n, k, c.checkpoint_keep); }},
        {"resume", [&](auto& n, auto& k) { return read_scalar(n, k, c.resume); }}}},
      {"reward",
       {{"builtin", [&](auto& n, auto& k) { return read_scalar(n, k, c.reward_builtin); }},
        {"program", [&](auto& n, auto& k) { return read_scalar(n, k, c.reward_program); }},
        {"timeout_s", [&](auto& n, auto& k) { return read_scalar(n, k, c.reward_timeout_s); }},
        {"processes", [&](auto& n, auto& k) { return read_scalar(n, k, c.reward_processes); }},
        {"step_checker", [&](auto& n, auto& k) { return read_scalar(n, k, c.step_checker); }},
        {"flawed_penalty", [&](auto& n, auto& k) { return read_scalar(n, k, c.flawed_penalty); }}}},
  };
  for (const auto& section : root) {
    const std::string name = section.first.as<std::string>();
    const auto found = sections.find(name);
    if (found == sections.end()) {
      return InvalidArgument(source + ": unknown section '" + name + "' (docs/rl.md lists the keys)");
    }
    if (!section.second.IsMap()) return InvalidArgument(source + ": " + name + " must be a mapping");
    for (const auto& entry : section.second) {
      const std::string key = entry.first.as<std::string>();
      const auto reader = found->second.find(key);
      if (reader == found->second.end()) {
        return InvalidArgument(source + ": unknown key '" + name + "." + key + "'");
      }
      Status s = reader->second(entry.second, name + "." + key);
      if (!s.ok()) return s.with_context(source);
    }
  }
  auto bad = [&](const std::string& message) { return InvalidArgument(source + ": " + message); };
  if (!loss_agg.empty()) {
    Result<LossAggregation> mode = parse_loss_aggregation(loss_agg);
    if (!mode.ok()) return bad("algorithm.loss_agg: " + mode.status().message());
    c.loss_agg = *mode;
  }
  if (!optimizer_name.empty()) {
    if (optimizer_name == "adamw") c.optimizer.name = config::OptimizerKind::kAdamW;
    else if (optimizer_name == "lamb") c.optimizer.name = config::OptimizerKind::kLamb;
    else return bad("optimizer.name must be adamw or lamb, got '" + optimizer_name + "'");
  }
  if (!schedule.empty()) {
    if (schedule == "constant") c.optimizer.schedule = config::LrSchedule::kConstant;
    else if (schedule == "cosine") c.optimizer.schedule = config::LrSchedule::kCosine;
    else if (schedule == "linear") c.optimizer.schedule = config::LrSchedule::kLinear;
    else return bad("optimizer.schedule must be constant, cosine or linear, got '" + schedule + "'");
  }
  if (c.optimizer.warmup_steps < 0) return bad("optimizer.warmup_steps must be >= 0");
  if (c.optimizer.min_lr < 0.0) return bad("optimizer.min_lr must be >= 0");
  if (!betas.empty()) {
    if (betas.size() != 2) return bad("optimizer.betas must hold two values");
    c.optimizer.betas = betas;
  }
  if (c.run_dir.empty()) return bad("run.dir is required");
  if (c.checkpoint.empty() == c.model_dir.empty()) {
    return bad("give exactly one of actor.checkpoint and actor.model_dir");
  }
  if (c.train_prompts.empty()) return bad("prompts.train is required");
  MS_RETURN_IF_ERROR(positive(c.group_size, "rollout.group_size").with_context(source));
  if (c.group_size < 2 && !has_critic(c.algorithm)) {
    return bad("rollout.group_size must be at least 2 for " +
               std::string(algorithm_name(c.algorithm)) + " (its advantages compare a group)");
  }
  if (c.group_size < 2 && c.dynamic_sampling) {
    return bad("algorithm.dynamic_sampling needs rollout.group_size of at least 2 (it drops "
               "groups whose rewards are all equal)");
  }
  MS_RETURN_IF_ERROR(positive(c.prompts_per_step, "rollout.prompts_per_step").with_context(source));
  MS_RETURN_IF_ERROR(positive(c.max_tokens, "rollout.max_tokens").with_context(source));
  MS_RETURN_IF_ERROR(positive(c.steps, "train.steps").with_context(source));
  MS_RETURN_IF_ERROR(positive(c.mini_batches, "train.mini_batches").with_context(source));
  MS_RETURN_IF_ERROR(positive(c.epochs, "train.epochs").with_context(source));
  MS_RETURN_IF_ERROR(positive(c.max_rounds, "algorithm.max_rounds").with_context(source));
  if (c.mini_batches > c.prompts_per_step) {
    return bad("train.mini_batches (" + std::to_string(c.mini_batches) +
               ") cannot exceed rollout.prompts_per_step (" + std::to_string(c.prompts_per_step) +
               "): a mini-batch holds whole groups");
  }
  if (c.temperature < 0.0) return bad("rollout.temperature must be >= 0");
  if (c.speculative_tokens < 0) return bad("rollout.speculative_tokens must be >= 0 (0: off)");
  if (c.async_staleness < -1) {
    return bad("rollout.async_staleness must be >= 0, or -1 for synchronous rollouts");
  }
  if (!(c.top_p > 0.0 && c.top_p <= 1.0)) return bad("rollout.top_p must be in (0, 1]");
  if (c.overlong_cache_len < 0) c.overlong_cache_len = std::max<int64_t>(1, c.max_tokens / 4);
  if (c.overlong_cache_len > c.max_tokens) {
    return bad("algorithm.overlong_cache_len (" + std::to_string(c.overlong_cache_len) +
               ") cannot exceed rollout.max_tokens (" + std::to_string(c.max_tokens) + ")");
  }
  if (c.kl_coef < 0.0) return bad("algorithm.kl_coef must be >= 0");
  if (c.clip.low < 0.0 || c.clip.low >= 1.0 || c.clip.high < 0.0) {
    return bad("algorithm.clip_low must be in [0, 1) and clip_high >= 0");
  }
  if (c.clip.dual != 0.0 && c.clip.dual <= 1.0) {
    return bad("algorithm.dual_clip must exceed 1 (or be 0: off)");
  }
  if (c.reward_builtin != "exact_number" && c.reward_builtin != "format") {
    return bad("reward.builtin must be exact_number or format, got '" + c.reward_builtin + "'");
  }
  if (!(c.reward_timeout_s > 0.0)) return bad("reward.timeout_s must be positive");
  if (c.reward_processes < 1) return bad("reward.processes must be at least 1");
  if (!std::isfinite(c.flawed_penalty) || c.flawed_penalty < 0.0) {
    return bad("reward.flawed_penalty must be a finite number of at least 0");
  }
  if (!(c.optimizer.lr > 0.0)) return bad("optimizer.lr must be positive");
  if (!has_critic(c.algorithm)) {
    if (root["critic"]) {
      return bad("the critic section applies to ppo and vapo; algorithm.name is " +
                 std::string(algorithm_name(c.algorithm)) + ", which has no value model");
    }
  } else {
    if (c.critic_lr == 0.0) c.critic_lr = 2.0 * c.optimizer.lr;
    if (!(c.critic_lr > 0.0)) return bad("critic.lr must be positive (or 0: twice optimizer.lr)");
    if (!(c.value_clip > 0.0)) return bad("critic.value_clip must be positive");
    if (c.critic_warmup_steps < 0) return bad("critic.warmup_steps must be >= 0");
    if (!(c.critic_warmup_until_ev <= 1.0) && !std::isinf(c.critic_warmup_until_ev)) {
      return bad("critic.warmup_until_explained_variance must be at most 1 (the explained "
                 "variance of a perfect critic)");
    }
    if (c.critic_warmup_steps >= c.steps) {
      return bad("critic.warmup_steps (" + std::to_string(c.critic_warmup_steps) +
                 ") must be below train.steps (" + std::to_string(c.steps) +
                 "): the actor trains only after the value pretraining steps");
    }
  }
  if (!(c.gamma >= 0.0 && c.gamma <= 1.0)) return bad("algorithm.gamma must be in [0, 1]");
  if (!(c.lambda >= 0.0 && c.lambda <= 1.0)) return bad("algorithm.lambda must be in [0, 1]");
  if (!(c.lambda_alpha > 0.0)) return bad("algorithm.lambda_alpha must be positive");
  if (!(c.positive_nll_coef >= 0.0)) return bad("algorithm.positive_nll_coef must be >= 0");
  if (!c.eval_answers.empty() && c.eval_prompts.empty()) {
    return bad("prompts.eval_answers needs prompts.eval (the prompts' dataset prefix)");
  }
  if (c.tp < 1) return bad("parallel.tp must be at least 1");
  if (c.tp > 1 && c.async_staleness >= 0 && placement != "split") {
    return bad("parallel.tp " + std::to_string(c.tp) + " with rollout.async_staleness " +
               std::to_string(c.async_staleness) + ": colocated asynchronous rollouts run on "
               "one rank at tp = 1 (placement.mode split runs them on rollout ranks at any tp)");
  }
  if (placement != "colocated" && placement != "split") {
    return bad("placement.mode must be colocated or split, got '" + placement + "'");
  }
  if (placement == "colocated" && c.rollout_ranks != 0) {
    return bad("placement.rollout_ranks applies to placement.mode split (colocated: every rank "
               "generates)");
  }
  if (placement == "split") {
    if (c.rollout_ranks < 1) {
      return bad("placement.mode split needs placement.rollout_ranks of at least 1");
    }
  }
  if (c.checkpoint_every < 0) return bad("checkpoint.every must be >= 0 (0: only at the end)");
  if (c.checkpoint_keep < 0) return bad("checkpoint.keep must be >= 0 (0: keep all)");
  if (c.resume != "auto" && c.resume != "none") {
    return bad("checkpoint.resume must be auto or none, got '" + c.resume + "'");
  }
  return c;
}

Result<RlConfig> load_rl_config(const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string text, io::read_file(path, 1 << 20, "RL config file"));
  return parse_rl_config(text, path);
}

}  // namespace ms::rl
