#include "rl/rollout.h"

#include <algorithm>

#include "rl/reward_program.h"
#include "rl/rewards.h"

namespace ms::rl {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer: distinct seeds per request
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Accuracy counts a response correct when the reference is an integer it states first.
bool matches(const std::string& text, const std::string& answer) {
  const Result<bool> r = answer_matches(text, answer);
  return r.ok() && *r;
}

}  // namespace

Result<std::unique_ptr<RolloutGenerator>> RolloutGenerator::create(
    model::Transformer& model, const data::Tokenizer& tokenizer, const RlConfig& config,
    const std::vector<PromptExample>& prompts) {
  std::unique_ptr<RolloutGenerator> g(new RolloutGenerator(tokenizer, config, prompts));
  int64_t longest = 0;
  g->prompt_tokens_.reserve(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    g->prompt_tokens_.push_back(tokenizer.encode(prompts[i].prompt, /*allow_special=*/false));
    const int64_t n = static_cast<int64_t>(g->prompt_tokens_.back().size());
    if (n == 0) return InvalidArgument("prompt " + std::to_string(i + 1) + " encodes to no tokens");
    if (n + config.max_tokens > model.config().max_seq_len) {
      return InvalidArgument("prompt " + std::to_string(i + 1) + " (" + std::to_string(n) +
                             " tokens) plus rollout.max_tokens (" +
                             std::to_string(config.max_tokens) +
                             ") exceeds the actor's model.max_seq_len (" +
                             std::to_string(model.config().max_seq_len) + ")");
    }
    longest = std::max(longest, n);
  }
  infer::EngineOptions options;
  options.max_batch = std::min<int64_t>(64, config.group_size * config.prompts_per_step);
  options.block_size = 16;
  const int64_t blocks_per_sequence =
      (longest + config.max_tokens + options.block_size - 1) / options.block_size;
  options.kv_blocks = options.max_batch * blocks_per_sequence;
  if (config.speculative_tokens > 0) {
    g->drafter_ = std::make_unique<RolloutDrafter>(4, 32, config.speculative_tokens);
    options.drafter = g->drafter_.get();
    options.draft_tokens = config.speculative_tokens;
  }
  MS_ASSIGN_OR_RETURN(g->engine_, infer::Engine::create(model, &tokenizer, options));
  return g;
}

Result<std::vector<double>> RolloutGenerator::rewards(
    std::vector<Rollout>& rollouts, const std::vector<const PromptExample*>& examples) {
  std::vector<double> out(rollouts.size());
  // What the reward program and the step checker read; built only when one is set.
  std::vector<RewardQuery> queries;
  if (!config_.reward_program.empty() || !config_.step_checker.empty()) {
    queries.reserve(rollouts.size());
    for (size_t i = 0; i < rollouts.size(); ++i) {
      queries.push_back({examples[i]->prompt, rollouts[i].text, examples[i]->answer});
    }
  }
  if (!config_.reward_program.empty()) {
    RewardProgram program{config_.reward_program, config_.reward_timeout_s,
                          config_.reward_processes};
    MS_ASSIGN_OR_RETURN(out, run_reward_program(program, queries));
  } else {
    for (size_t i = 0; i < rollouts.size(); ++i) {
      const double correct = rollouts[i].correct ? 1.0 : 0.0;
      // format: a correct answer in the expected shape scores 1, a wrong one 0, a malformed
      // response -1, so the shape is learned before the arithmetic.
      out[i] = config_.reward_builtin == "format"
                   ? (format_ok(rollouts[i].text) ? correct : -1.0)
                   : correct;
    }
  }
  if (!config_.step_checker.empty()) {
    RewardProgram checker{config_.step_checker, config_.reward_timeout_s,
                          config_.reward_processes};
    MS_ASSIGN_OR_RETURN(const std::vector<bool> flawed, flawed_positives(checker, queries, out));
    for (size_t i = 0; i < rollouts.size(); ++i) {
      rollouts[i].flawed = flawed[i];
      if (flawed[i]) out[i] -= config_.flawed_penalty;
    }
  }
  if (config_.overlong_cache_len > 0) {
    for (size_t i = 0; i < rollouts.size(); ++i) {
      MS_ASSIGN_OR_RETURN(const double penalty,
                          overlong_penalty(static_cast<int64_t>(rollouts[i].sample.response.size()),
                                           config_.max_tokens, config_.overlong_cache_len));
      out[i] += penalty;
    }
  }
  return out;
}

Result<std::vector<RolloutGroup>> RolloutGenerator::sample_groups(
    std::span<const size_t> prompt_indices, uint64_t seed, size_t first_position) {
  std::vector<infer::Request> requests;
  const int64_t g_size = config_.group_size;
  requests.reserve(prompt_indices.size() * static_cast<size_t>(g_size));
  for (size_t p = 0; p < prompt_indices.size(); ++p) {
    for (int64_t g = 0; g < g_size; ++g) {
      infer::Request r;
      const uint64_t position = first_position + p;
      r.id = std::to_string(position) + "/" + std::to_string(g);
      r.prompt = prompt_tokens_[prompt_indices[p]];
      r.max_tokens = config_.max_tokens;
      r.sampling.temperature = config_.temperature;
      r.sampling.top_p = config_.top_p;
      r.sampling.seed = mix(seed ^ mix(position * 1000003ULL + static_cast<uint64_t>(g)));
      r.stop = config_.stop;
      requests.push_back(std::move(r));
    }
  }
  MS_ASSIGN_OR_RETURN(std::vector<infer::Completion> done, engine_->generate(requests));
  std::vector<Rollout> flat(done.size());
  std::vector<const PromptExample*> examples(done.size());
  for (size_t i = 0; i < done.size(); ++i) {
    if (done[i].finish_reason == "error") {
      return Internal("rollout of prompt " + std::to_string(prompt_indices[i / g_size] + 1) +
                      " refused by the engine: " + done[i].error);
    }
    Rollout& r = flat[i];
    r.prompt_index = prompt_indices[i / static_cast<size_t>(g_size)];
    r.sample.prompt = requests[i].prompt;
    r.sample.response = std::move(done[i].tokens);
    Result<std::string> text = tokenizer_.decode(r.sample.response);
    r.text = text.ok() ? *text : std::string();
    r.truncated = done[i].finish_reason == "length";
    examples[i] = &prompts_[r.prompt_index];
    r.correct = matches(r.text, examples[i]->answer);
  }
  if (drafter_) {
    for (const Rollout& r : flat) drafter_->add(r.sample.prompt, r.sample.response);
  }
  MS_ASSIGN_OR_RETURN(const std::vector<double> scores, rewards(flat, examples));
  std::vector<RolloutGroup> groups(prompt_indices.size());
  for (size_t i = 0; i < flat.size(); ++i) {
    flat[i].reward = scores[i];
    groups[i / static_cast<size_t>(g_size)].push_back(std::move(flat[i]));
  }
  return groups;
}

Result<int64_t> RolloutGenerator::greedy_correct(std::span<const PromptExample> examples) {
  if (examples.empty()) return 0;
  std::vector<infer::Request> requests;
  requests.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    infer::Request r;
    r.id = std::to_string(i);
    r.prompt = tokenizer_.encode(examples[i].prompt, /*allow_special=*/false);
    if (r.prompt.empty()) return InvalidArgument("held-out prompt " + std::to_string(i + 1) + " is empty");
    r.max_tokens = config_.max_tokens;
    r.stop = config_.stop;
    requests.push_back(std::move(r));
  }
  MS_ASSIGN_OR_RETURN(std::vector<infer::Completion> done, engine_->generate(requests));
  int64_t correct = 0;
  for (size_t i = 0; i < done.size(); ++i) {
    if (done[i].finish_reason == "error") {
      return Internal("held-out prompt " + std::to_string(i + 1) + " refused: " + done[i].error);
    }
    Result<std::string> text = tokenizer_.decode(done[i].tokens);
    correct += matches(text.ok() ? *text : "", examples[i].answer);
  }
  return correct;
}

}  // namespace ms::rl
