// The plan of an offline reshard (`ms-ckpt reshard --to tp=2,dp=2,zero=1`, `--to pp=2,tp=2`,
// `--to ep=4,dp=4`):
// which boxes of which tensors each rank of the target layout writes. Pure arithmetic on a
// manifest, so every process computes the same plan and tests can check it without files.
//
// Target ranks follow the Mesh (comm/mesh.h): rank = (pp_rank * dp + dp_rank) * tp + tp_rank,
// tp fastest; ep divides dp and ep_rank = dp_rank % ep. The tensor-parallel slice of a tensor,
// the pipeline ranks and the ep rank holding it come from placement rules the caller passes in
// (parallel::tp_shard, parallel::pp_ranks_holding and parallel::ep_rank_holding in ms-ckpt):
// lib/ckpt sits beside lib/parallel and does not link it, so each rule by tensor name has
// exactly one home.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/regions.h"
#include "comm/shard_spec.h"
#include "core/status.h"

namespace ms::ckpt {

// The most ranks (pp x dp x tp) and pipeline stages (pp x vpp) a reshard target may have: above
// the largest jobs run today (about 1e5 ranks), and small enough that the plan's per-rank
// tables (a byte count per target rank, holder lists per box) stay a few MiB.
inline constexpr int kMaxReshardRanks = 1 << 20;

struct ReshardTarget {
  int dp = 1;
  int tp = 1;
  int zero = 0;  // 1: optimizer state ("optimizer.*") is split into flat ranges across dp
  int pp = 1;    // pipeline ranks
  int vpp = 1;   // virtual stages (chunks) per pipeline rank
  std::vector<int64_t> pp_layers;  // layers per virtual stage; empty: an even cut
  int ep = 1;  // expert-parallel ranks: divides dp; dp rank d holds the experts of ep rank d % ep
  int world() const { return pp * dp * tp; }
  // Whether tensors are placed on pipeline stages at all (any key other than the defaults).
  bool pipelined() const { return pp > 1 || vpp > 1 || !pp_layers.empty(); }
};

// "tp=2,dp=2,zero=1", "pp=2,vpp=2,dp=2", "pp=2,pp_layers=4+2", "ep=4,dp=4" -> target; keys may
// come in any order and default to dp=1, tp=1, zero=0, pp=1, vpp=1, ep=1 and an even layer cut.
// pp_layers lists the layers of each virtual stage separated by '+' (a ',' would end the item);
// whether they fit the model is checked by the plan, which knows n_layers (and whether ep
// divides the experts, which knows model.moe.num_experts). An ep that does not divide dp, unknown
// or repeated keys, bad numbers, and a target of more than kMaxReshardRanks ranks or stages are
// InvalidArgument naming them.
Result<ReshardTarget> parse_reshard_target(std::string_view text);

// The target as --to text, e.g. "pp=2,vpp=1,pp_layers=4+2,tp=2,dp=1,zero=0" (pp keys only when
// pipelined(), ep only when above 1: "tp=1,ep=2,dp=2,zero=0").
std::string reshard_target_string(const ReshardTarget& target);

// The slice tp rank `rank` of `tp` holds of tensor `name` with global shape `shape`: a whole
// box (ShardSpec::box or replicated), possibly empty. An error (tp does not divide a split
// dimension) refuses the reshard.
using TpPlacement = std::function<Result<comm::ShardSpec>(
    std::string_view name, const std::vector<int64_t>& shape, int tp, int rank)>;

// The pipeline ranks (each in [0, pp), ascending) holding tensor `name` of a model with
// n_layers layers (tie_embeddings: the last stage also holds model.embed_tokens.weight), cut
// into pp * vpp virtual stages by `pp_layers` (empty: evenly). An error (an unknown name, a
// layer out of range, a cut that does not fit) refuses the reshard.
using PpPlacement = std::function<Result<std::vector<int>>(
    std::string_view name, int64_t n_layers, bool tie_embeddings, int pp, int vpp,
    const std::vector<int64_t>& pp_layers)>;

// The ep rank (in [0, ep)) holding tensor `name` of a model with num_experts experts per layer,
// or std::nullopt when every ep rank holds it (not a routed expert). An error (a malformed expert
// name, an expert out of range) refuses the reshard.
using EpPlacement = std::function<Result<std::optional<int>>(std::string_view name,
                                                             int64_t num_experts, int ep)>;

// One output shard: box `box` of tensor `tensor` (index into Manifest::tensors), written by
// target rank `target_rank` into its data file.
struct PlannedShard {
  size_t tensor = 0;
  int target_rank = 0;
  Box box;
};

// The shards the target layout saves. For each tensor, `placement` gives every tp rank's box
// (with target.tp == 1 and no placement, the whole tensor) and, when target.pipelined(),
// `pp_placement` the pipeline ranks holding it (otherwise pipeline rank 0), with n_layers and
// tie_embeddings read from the manifest's config_yaml (its `model:` section), and, when
// target.ep > 1, `ep_placement` the ep rank holding it (model.moe.num_experts from the same
// config). A box is held by every holding dp rank of every holding pipeline rank, for each tp
// rank whose box it is: all dp ranks, or for an expert of ep rank e the dp ranks d with
// d % ep == e (its expert-data-parallel group). A box held by several target ranks is written
// once, by the holder with the fewest bytes so far (so writes are balanced). Optimizer state
// under zero=1 is, per tp box, split over the k holding dp ranks: the j-th of them owns the
// flat range [j*N/k, (j+1)*N/k) of that box (the ZeRO ownership rule, ckpt/zero_ownership.h)
// decomposed into regular boxes, on each holding pipeline rank; a box with fewer elements than k is written once instead. Empty boxes (a tp
// rank holding only vocabulary padding) are skipped. Boxes are split to at most
// max_shard_bytes where a row allows. Deterministic. InvalidArgument naming the tensor when a
// placement refuses it, when target.tp > 1, target.pipelined() or target.ep > 1 and the rule
// is not given, when such a target meets a manifest without a readable run config, when ep
// does not divide dp, or (naming model.moe.num_experts and ep) when the model's experts are
// none or not a multiple of ep.
Result<std::vector<PlannedShard>> plan_reshard(const Manifest& m, const ReshardTarget& target,
                                               const TpPlacement& placement,
                                               const PpPlacement& pp_placement,
                                               const EpPlacement& ep_placement,
                                               uint64_t max_shard_bytes);

}  // namespace ms::ckpt
