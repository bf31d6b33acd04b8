// Asynchronous rollouts (issue 46; Laminar's decoupling of rollout from training): a rollout
// thread generates the rollouts of step i on its own copy of the actor, holding the weights
// after step max(start, i - 1 - k), while the trainer updates; it takes a new version between
// batches only, so a batch never mixes versions, and each batch records its version. k is the
// staleness bound (rollout.async_staleness). k = 0 waits for the previous step's weights, so
// it generates exactly what the synchronous loop does; k > 0 lets generation run up to k steps
// ahead of training. The behavior policy's log-probs come from the generating copy, so the
// clipped ratio is taken against the weights that really produced each response.
//
// The versions follow the run, not the process: step i uses the weights after step
// max(0, i - 1 - k) whether the run started at step 0 or resumed later, and a checkpoint after
// step s keeps the older versions the next k steps still need (held_versions_before), so a
// resumed run generates what the uninterrupted one did, bit for bit.
//
// One data-parallel rank only: with one rank the generation side makes no communicator call
// (agree and the rank sums return at once), so the rollout thread can run it beside the
// trainer's thread. Over several ranks, split placement runs the same schedule on its rollout
// ranks (RlRun::split_step).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/tokenizer.h"
#include "model/transformer.h"
#include "rl/prompt_dataset.h"
#include "rl/rl_config.h"
#include "rl/rollout.h"
#include "rl/step_rollouts.h"

namespace ms::rl {

// Weights of the actor after some steps, by step: one vector per parameter, in
// Transformer::parameters() order.
using WeightVersions = std::map<int64_t, std::vector<std::vector<float>>>;

// A copy of the model's parameter values (its own slices under tp), in parameters() order.
std::vector<std::vector<float>> copy_weights(const model::Transformer& m);

// A resumed asynchronous run: keeps the versions before `current` (the actor's own weights,
// after step `current`) and adds each version in [first, current) that `versions` lacks, taken
// from the next newer one held (or `current` itself). Returns how many were added: then the run
// is not bitwise the uninterrupted one.
int fill_missing_versions(WeightVersions& versions, int64_t first, int64_t current,
                          const std::vector<std::vector<float>>& current_weights);

class AsyncRollouts {
 public:
  // Starts the rollout thread for steps start_step + 1 .. config.steps, with the actor's
  // current weights as version start_step, `older` the versions before it that a resumed run's
  // checkpoint held, and `stream` as the prompt position. A version the next steps need but
  // `older` lacks (a checkpoint saved at another staleness, or by a synchronous run) is taken
  // from the next newer one; `substituted` then counts them (the run is not bitwise the
  // uninterrupted one). Everything passed by reference must outlive this object; `dp` must
  // have one rank.
  static Result<std::unique_ptr<AsyncRollouts>> start(
      const RlConfig& config, comm::Communicator& dp, const data::Tokenizer& tokenizer,
      const std::vector<PromptExample>& prompts, model::Transformer& actor, PromptStream stream,
      int64_t start_step, int32_t pad, WeightVersions older, int* substituted);
  // Stops the rollout thread after its current batch and joins it.
  ~AsyncRollouts();
  AsyncRollouts(const AsyncRollouts&) = delete;
  AsyncRollouts& operator=(const AsyncRollouts&) = delete;

  // The rollouts of `step`, waiting for the thread to finish them; the thread's error once it
  // failed (it then stops).
  Result<StepRollouts> take(int64_t step);
  // Hands the actor's weights after `step` to the rollout thread (a copy: the trainer goes on
  // updating its own), and drops the versions no step after `step` needs.
  void publish(int64_t step);
  // The versions older than `step` still held, by step, without a copy: after publish(step),
  // those the next k steps need besides the actor's own (what a checkpoint after `step`
  // saves). Only publish, on the trainer's thread, removes a version (the rollout thread only
  // reads them), so the pointers stay valid until the trainer's next publish.
  std::vector<std::pair<int64_t, const std::vector<std::vector<float>>*>> held_versions_before(
      int64_t step);

 private:
  AsyncRollouts(const RlConfig& config, comm::Communicator& dp, model::Transformer& actor,
                PromptStream stream, int64_t start_step, int32_t pad);
  void run();
  // The version step's rollouts are generated with: the weights after step
  // max(0, step - 1 - k).
  int64_t version_for(int64_t step) const;

  const RlConfig& config_;
  comm::Communicator& dp_;
  model::Transformer& actor_;
  std::unique_ptr<model::Transformer> copy_;  // the rollout thread's model
  std::unique_ptr<RolloutGenerator> generator_;
  PromptStream stream_;
  int64_t start_step_;
  int32_t pad_;

  std::mutex mutex_;
  std::condition_variable changed_;
  WeightVersions versions_;  // published weights by step
  std::deque<StepRollouts> ready_;
  Status failed_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ms::rl
