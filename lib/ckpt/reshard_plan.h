// The plan of an offline reshard (`ms-ckpt reshard --to tp=2,dp=2,zero=1`): which boxes of
// which tensors each rank of the target layout writes. Pure arithmetic on a manifest, so every
// process computes the same plan and tests can check it without files.
//
// Target ranks follow the Mesh (comm/mesh.h): rank = dp_rank * tp + tp_rank, tp fastest. The
// tensor-parallel slice of a tensor comes from a placement rule the caller passes in
// (parallel::tp_shard in ms-ckpt): lib/ckpt sits beside lib/parallel and does not link it, so
// the rule by tensor name has exactly one home.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/regions.h"
#include "comm/shard_spec.h"
#include "core/status.h"

namespace ms::ckpt {

struct ReshardTarget {
  int dp = 1;
  int tp = 1;
  int zero = 0;  // 1: optimizer state ("optimizer.*") is split into flat ranges across dp
  int world() const { return dp * tp; }
};

// "tp=2,dp=2,zero=1" -> target; keys may come in any order and default to dp=1, tp=1, zero=0.
// pp and ep other than 1 are refused (the offline reshard does not place pipeline stages or
// experts yet); unknown keys and bad numbers are InvalidArgument naming them.
Result<ReshardTarget> parse_reshard_target(std::string_view text);

// The slice tp rank `rank` of `tp` holds of tensor `name` with global shape `shape`: a whole
// box (ShardSpec::box or replicated), possibly empty. An error (tp does not divide a split
// dimension) refuses the reshard.
using TpPlacement = std::function<Result<comm::ShardSpec>(
    std::string_view name, const std::vector<int64_t>& shape, int tp, int rank)>;

// One output shard: box `box` of tensor `tensor` (index into Manifest::tensors), written by
// target rank `target_rank` into its data file.
struct PlannedShard {
  size_t tensor = 0;
  int target_rank = 0;
  Box box;
};

// The shards the target layout saves. For each tensor, `placement` gives every tp rank's box
// (with target.tp == 1 and no placement, the whole tensor). A box held by several target ranks
// (a replicated tensor, or any tp box: the dp ranks all hold it) is written once, by the holder
// with the fewest bytes so far (so writes are balanced). Optimizer state under zero=1 is, per
// tp box, each dp rank's flat range of that box [r*N/dp, (r+1)*N/dp) decomposed into regular
// boxes; a box with fewer elements than dp is written once instead. Empty boxes (a tp rank
// holding only vocabulary padding) are skipped. Boxes are split to at most max_shard_bytes
// where a row allows. Deterministic. InvalidArgument naming the tensor when the placement
// refuses it, or when target.tp > 1 and no placement is given.
Result<std::vector<PlannedShard>> plan_reshard(const Manifest& m, const ReshardTarget& target,
                                               const TpPlacement& placement,
                                               uint64_t max_shard_bytes);

}  // namespace ms::ckpt
