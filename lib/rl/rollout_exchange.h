// Rollouts crossing ranks: when generation runs on more ranks than training has data-parallel
// ranks (a tensor-parallel actor generating at tp = 1 on every rank, rollout_weights.h), the
// members of a tp group generate disjoint groups of a round and then each needs all of them,
// since every tp rank trains on the same micro-batches.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "rl/rollout.h"

namespace ms::rl {

// Every member's `local` groups, in rank order (rank 0's first), on every member: each rollout
// whole (prompt and response tokens, text, reward and flags). Collective over `group`
// (comm::all_gather_variable). Corruption when a member's bytes do not
// parse (a bug, not user input).
Result<std::vector<RolloutGroup>> gather_rollout_groups(comm::Communicator& group,
                                                        const std::vector<RolloutGroup>& local);

}  // namespace ms::rl
