// Rollouts crossing ranks: when generation runs on more ranks than training has data-parallel
// ranks (a tensor-parallel actor generating at tp = 1 on every rank, rollout_weights.h), the
// members of a tp group generate disjoint groups of a round and then each needs all of them,
// since every tp rank trains on the same micro-batches. Under split placement the rollout
// ranks generate a step among themselves and hand the whole of it to the trainers.
#pragma once

#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "rl/rollout.h"
#include "rl/step_rollouts.h"

namespace ms::rl {

// Every member's `local` groups, in rank order (rank 0's first), on every member: each rollout
// whole (prompt and response tokens, text, reward and flags). Collective over `group`
// (comm::all_gather_variable). Corruption when a member's bytes do not
// parse (a bug, not user input).
Result<std::vector<RolloutGroup>> gather_rollout_groups(comm::Communicator& group,
                                                        const std::vector<RolloutGroup>& local);

// Split placement: the step the rollout ranks generated among themselves, on every rank of
// `world`. World rank `source` (the first rollout rank) sends the step's outcome: the error
// the rollout ranks agreed on, or the kept groups, the generation figures (reshard ones
// included) and the prompt stream after the step (stream_after); every rank its groups of
// each round (none on a trainer, which passes an empty step). Returns that error, or the step
// with each round's groups pooled in world rank order (the rollout ranks' order, so the
// round's positions from 0), each kept rollout carrying its behavior log-probs; kept, before
// and behavior are left for the trainer to set (keep_trained_share, collect_behavior).
// Collective over world.
Result<StepRollouts> hand_off_step_rollouts(comm::Communicator& world, int source,
                                            const Result<StepRollouts>& mine);

}  // namespace ms::rl
