// DAPO's dynamic sampling: a group whose G rewards are all equal has zero advantage everywhere
// (GRPO normalises within the group) and trains nothing, so such groups are dropped and more
// prompts are generated until the batch holds `target_groups` groups with varied rewards.
// Generation is bounded: after `max_rounds` rounds without enough groups the step fails with an
// error naming the bound, rather than looping on a task the model always (or never) solves.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/status.h"

namespace ms::rl {

struct GroupRef {
  int64_t round = 0;  // which generation round produced it
  int64_t index = 0;  // its position within that round
};

struct FilledBatch {
  std::vector<GroupRef> kept;  // exactly target_groups, in generation order
  int64_t dropped = 0;         // groups with all-equal rewards
  int64_t surplus = 0;         // varied groups generated beyond the target (not trained on)
  int64_t rounds = 0;          // generation rounds used
};

// True when the rewards are not all equal (exact comparison: rewards are computed, not
// measured, so equal answers score bitwise-equal rewards).
bool rewards_vary(const std::vector<double>& group_rewards);

// generate_round(round) returns that round's groups, each as its G rewards (the caller keeps
// the responses themselves and looks them up through GroupRef). With `filter` false every group
// is kept (plain GRPO) and one round must suffice. FailedPrecondition naming the counts and
// the bound (the key `bound_key`) when max_rounds rounds leave the batch short; the error of
// generate_round is passed on.
Result<FilledBatch> fill_batch(
    int64_t target_groups, int64_t max_rounds, bool filter, const char* bound_key,
    const std::function<Result<std::vector<std::vector<double>>>(int64_t round)>& generate_round);

}  // namespace ms::rl
