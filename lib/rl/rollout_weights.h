// The hybrid engine's in-memory reshard (HybridFlow): the actor trains at tp = N, holding a
// slice of each split tensor, while generation runs at tp = 1 on whole weights, gathered from
// the slices after every update with no file in between.
//   - colocated: every rank generates; each gathers the whole weights from its own tp group
//     (the group is the tp group, every member holds slices and receives);
//   - split placement: only the rollout ranks generate; the group is the tp ranks of the first
//     data-parallel rank, which hold the slices, then the rollout ranks, which receive.
// Split tensors cross the group by one all-gather each; a replicated one (norms, the router)
// is copied locally when every member holds it, and otherwise sent by member 0.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "model/transformer.h"

namespace ms::rl {

struct ReshardReport {
  uint64_t bytes_received = 0;  // from the other members of the group, this rank
  double seconds = 0;
};

// Members 0 .. holders - 1 of `group` are tp ranks 0 .. holders - 1 of the actor and pass their
// slices as `sharded`; the others pass null. Members passing `whole` (tp = 1: every tensor
// replicated) receive in it the global tensors (parallel::tp_shard's rule places every slice);
// a holder may pass null. Tables on the same rank must list the same names and global shapes
// in the same order (InvalidArgument naming the first that differs, before any
// communication), and every rank's tables come from the same model config. Collective over
// group.
Result<ReshardReport> gather_whole_weights(comm::Communicator& group, int holders,
                                           const std::vector<model::Parameter>* sharded,
                                           std::vector<model::Parameter>* whole);

}  // namespace ms::rl
