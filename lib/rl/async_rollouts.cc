#include "rl/async_rollouts.h"

#include <algorithm>
#include <exception>

namespace ms::rl {

std::vector<std::vector<float>> copy_weights(const model::Transformer& m) {
  std::vector<std::vector<float>> out;
  for (const model::Parameter& p : m.parameters()) {
    const float* v = p.value.data<float>();
    out.emplace_back(v, v + p.value.numel());
  }
  return out;
}

int fill_missing_versions(WeightVersions& versions, int64_t first, int64_t current,
                          const std::vector<std::vector<float>>& current_weights) {
  versions.erase(versions.lower_bound(current), versions.end());
  int added = 0;
  for (int64_t v = first; v < current; ++v) {
    if (versions.count(v) != 0) continue;
    const auto newer = versions.upper_bound(v);
    versions[v] = newer != versions.end() ? newer->second : current_weights;
    ++added;
  }
  return added;
}

AsyncRollouts::AsyncRollouts(const RlConfig& config, comm::Communicator& dp,
                             model::Transformer& actor, PromptStream stream, int64_t start_step,
                             int32_t pad)
    : config_(config),
      dp_(dp),
      actor_(actor),
      stream_(std::move(stream)),
      start_step_(start_step),
      pad_(pad) {}

Result<std::unique_ptr<AsyncRollouts>> AsyncRollouts::start(
    const RlConfig& config, comm::Communicator& dp, const data::Tokenizer& tokenizer,
    const std::vector<PromptExample>& prompts, model::Transformer& actor, PromptStream stream,
    int64_t start_step, int32_t pad, WeightVersions older, int* substituted) {
  if (dp.size() != 1) {
    return InvalidArgument("colocated rollout.async_staleness runs on one rank, got " +
                           std::to_string(dp.size()) + " data-parallel ranks; placement.mode "
                           "split runs it on rollout ranks (docs/rl.md)");
  }
  std::unique_ptr<AsyncRollouts> a(
      new AsyncRollouts(config, dp, actor, std::move(stream), start_step, pad));
  MS_ASSIGN_OR_RETURN(a->copy_, model::Transformer::create(actor.config(), config.seed));
  MS_ASSIGN_OR_RETURN(a->generator_,
                      RolloutGenerator::create(*a->copy_, tokenizer, config, prompts));
  a->versions_ = std::move(older);
  std::vector<std::vector<float>> current = copy_weights(actor);
  // The versions steps start_step + 1 .. start_step + k use.
  *substituted =
      fill_missing_versions(a->versions_, a->version_for(start_step + 1), start_step, current);
  a->versions_[start_step] = std::move(current);
  a->thread_ = std::thread([raw = a.get()] { raw->run(); });
  return a;
}

AsyncRollouts::~AsyncRollouts() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

int64_t AsyncRollouts::version_for(int64_t step) const {
  return std::max<int64_t>(0, step - 1 - config_.async_staleness);
}

void AsyncRollouts::publish(int64_t step) {
  std::vector<std::vector<float>> weights = copy_weights(actor_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    versions_[step] = std::move(weights);
    // Steps after `step` need this version or newer ones; the rollout thread, possibly ahead,
    // has loaded what it generates from already.
    versions_.erase(versions_.begin(), versions_.lower_bound(version_for(step + 1)));
  }
  changed_.notify_all();
}

std::vector<std::pair<int64_t, const std::vector<std::vector<float>>*>>
AsyncRollouts::held_versions_before(int64_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<int64_t, const std::vector<std::vector<float>>*>> out;
  for (auto it = versions_.begin(); it != versions_.lower_bound(step); ++it) {
    out.emplace_back(it->first, &it->second);
  }
  return out;
}

Result<StepRollouts> AsyncRollouts::take(int64_t step) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || !failed_.ok(); });
  if (ready_.empty()) return failed_;
  StepRollouts out = std::move(ready_.front());
  ready_.pop_front();
  if (out.step != step) {
    return Internal("asynchronous rollouts out of order: wanted step " + std::to_string(step) +
                    ", got " + std::to_string(out.step));
  }
  return out;
}

// For each step in order: wait for its weights version, load it into the copy, generate.
void AsyncRollouts::run() {
  for (int64_t step = start_step_ + 1; step <= config_.steps; ++step) {
    const int64_t version = version_for(step);
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || versions_.count(version) > 0; });
      if (stop_) return;
      const std::vector<std::vector<float>>& weights = versions_.at(version);
      std::vector<model::Parameter>& params = copy_->parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        std::copy(weights[i].begin(), weights[i].end(), params[i].value.data<float>());
      }
    }
    Result<StepRollouts> rollouts = Internal("no rollouts");
    try {
      RolloutSide side{config_, dp_,          &dp_, nullptr, 0, generator_.get(),
                       copy_.get(), 0, 1, stream_, pad_};
      rollouts = generate_step_rollouts(side, step, version);
      if (rollouts.ok()) rollouts->stream_after = stream_;
    } catch (const std::exception& e) {
      rollouts = Internal(std::string("the rollout thread threw: ") + e.what());
    }
    const bool failed = !rollouts.ok();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed) {
        failed_ = rollouts.status();
      } else {
        ready_.push_back(std::move(*rollouts));
      }
    }
    changed_.notify_all();
    if (failed) return;
  }
}

}  // namespace ms::rl
