#include "rl/dynamic_sampling.h"

#include <string>

namespace ms::rl {

bool rewards_vary(const std::vector<double>& group_rewards) {
  for (double r : group_rewards) {
    if (r != group_rewards.front()) return true;
  }
  return false;
}

Result<FilledBatch> fill_batch(
    int64_t target_groups, int64_t max_rounds, bool filter, const char* bound_key,
    const std::function<Result<std::vector<std::vector<double>>>(int64_t round)>& generate_round) {
  if (target_groups < 1) {
    return InvalidArgument("the batch needs at least one group, got " + std::to_string(target_groups));
  }
  if (max_rounds < 1) {
    return InvalidArgument(std::string(bound_key) + " must be at least 1, got " +
                           std::to_string(max_rounds));
  }
  FilledBatch batch;
  while (static_cast<int64_t>(batch.kept.size()) < target_groups) {
    if (batch.rounds == max_rounds) {
      return FailedPrecondition(
          "dynamic sampling found " + std::to_string(batch.kept.size()) + " of " +
          std::to_string(target_groups) + " groups with varied rewards after " +
          std::to_string(batch.rounds) + " generation rounds (" + std::to_string(batch.dropped) +
          " groups had all-equal rewards); the bound is " + bound_key + " = " +
          std::to_string(max_rounds));
    }
    const int64_t round = batch.rounds++;
    MS_ASSIGN_OR_RETURN(std::vector<std::vector<double>> groups, generate_round(round));
    for (size_t i = 0; i < groups.size(); ++i) {
      if (filter && !rewards_vary(groups[i])) {
        ++batch.dropped;
      } else if (static_cast<int64_t>(batch.kept.size()) < target_groups) {
        batch.kept.push_back({round, static_cast<int64_t>(i)});
      } else {
        ++batch.surplus;
      }
    }
  }
  return batch;
}

}  // namespace ms::rl
