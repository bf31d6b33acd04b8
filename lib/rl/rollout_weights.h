// The hybrid engine's in-memory reshard (HybridFlow) for a tensor-parallel actor: the actor
// trains at tp = N, holding a slice of each split tensor, while generation runs at tp = 1 on
// every rank (tp = 1 x dp = world): each rank's rollout model holds the whole weights, gathered
// from its tp group's slices after every update, with no file in between. Only the split
// tensors cross the group; replicated ones (norms, the router) are copied locally.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/transformer.h"

namespace ms::rl {

struct ReshardReport {
  uint64_t bytes_received = 0;  // from the other ranks of the tp group, this rank
  double seconds = 0;
};

// Writes into each whole[i] (tp = 1: every tensor replicated) the global tensor whose slices
// sharded[i] holds across `tp` (parallel::tp_shard's rule gives every rank's slice). The two
// tables must list the same names and global shapes in the same order (InvalidArgument
// naming the first that differs, before any communication). Collective over tp: one
// all-gather per split tensor.
Result<ReshardReport> gather_tp_weights(comm::Communicator& tp,
                                        const std::vector<model::Parameter>& sharded,
                                        std::vector<model::Parameter>& whole);

}  // namespace ms::rl
