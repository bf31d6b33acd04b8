// The Mesh: how the world's ranks split into pipeline, data, context, tensor and expert parallel
// groups.
//
// Order (docs/comm.md): world = pp x dp x cp x tp model ranks, tensor-parallel fastest, then
// context-parallel,
//   rank = ((pp_rank * dp + dp_rank) * cp + cp_rank) * tp + tp_rank,
// followed by `loaders` data-loader ranks that hold no model; cp = 1 is the pp x dp x tp order.
// Dense-weight gradients are reduced over dp x cp (the dp_cp group). Expert parallelism is
// carved out of dp x cp ("parallel folding"): ep divides dp * cp; numbering a dp_cp group's
// ranks dp_cp = dp_rank * cp + cp_rank, ep consecutive ones form an ep group (expert weights
// split across them) and the ranks with the same ep_rank across the dp_cp group's dp * cp / ep
// ep-groups form an expert-data-parallel (edp) group (expert weights replicated, their
// gradients reduced there).
//
// MeshLayout is the pure coordinate arithmetic (no MPI); Mesh creates the groups.
#pragma once

#include <array>
#include <memory>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::comm {

struct MeshShape {
  int pp = 1;
  int dp = 1;
  int tp = 1;
  int ep = 1;       // divides dp * cp
  int loaders = 0;  // trailing data-loader ranks
  // Last although it sits between dp and tp in the rank order, so that positional initializers
  // written before cp existed ({pp, dp, tp, ep, loaders}) keep their meaning.
  int cp = 1;

  int model_size() const { return pp * dp * cp * tp; }
  int world_size() const { return model_size() + loaders; }
};

// Where a model rank sits. dp_cp is its rank in its dp_cp group (dp * shape.cp + cp), ep its
// rank in its ep group, edp its rank in its edp group.
struct MeshCoord {
  int pp = 0;
  int dp = 0;
  int cp = 0;
  int tp = 0;
  int dp_cp = 0;
  int ep = 0;
  int edp = 0;
  bool loader = false;  // a data-loader rank: every other field is 0
};

// kDpCp is the dp x cp group (dense-weight gradients); kAllMeshAxes lists every axis in
// declaration order.
enum class MeshAxis { kPp, kDp, kCp, kTp, kDpCp, kEp, kEdp, kModel };
inline constexpr MeshAxis kAllMeshAxes[] = {MeshAxis::kPp, MeshAxis::kDp,   MeshAxis::kCp,
                                            MeshAxis::kTp, MeshAxis::kDpCp, MeshAxis::kEp,
                                            MeshAxis::kEdp, MeshAxis::kModel};

// "pp", "dp", "cp", "tp", "dp_cp", "ep", "edp", "model" (the group names communicators get).
std::string_view mesh_axis_name(MeshAxis axis);

class MeshLayout {
 public:
  // InvalidArgument when a size is < 1 (loaders < 0), ep does not divide dp * cp, or world_size
  // is not pp * dp * cp * tp + loaders (the message names all the sizes; cp only when it is not
  // 1, so a run without context parallelism is not told about it).
  static Result<MeshLayout> create(const MeshShape& shape, int world_size);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size(); }
  int model_size() const { return shape_.model_size(); }
  bool is_loader(int rank) const { return rank >= model_size(); }

  // Coordinates of world rank `rank` (0 <= rank < world_size()).
  MeshCoord coord(int rank) const;
  // World rank of model coordinates (pp, dp, cp, tp).
  int rank_of(int pp, int dp, int cp, int tp) const;
  // The same at cp rank 0, the only one when shape().cp == 1.
  int rank_of(int pp, int dp, int tp) const { return rank_of(pp, dp, 0, tp); }
  // World ranks of the `axis` group that `rank` belongs to, ordered by rank within the group.
  // Empty for a loader rank.
  std::vector<int> group(MeshAxis axis, int rank) const;

 private:
  explicit MeshLayout(const MeshShape& shape) : shape_(shape) {}
  // World rank at position `dp_cp` of the dp_cp group of (pp, tp).
  int rank_of_dp_cp(int pp, int dp_cp, int tp) const;
  // The pp, dp, cp or tp group of `c`: its ranks with that one coordinate varied.
  std::vector<int> single_axis_group(MeshAxis axis, const MeshCoord& c) const;
  // Ranks along dp x cp: the dp_cp, ep and edp groups.
  std::vector<int> folded_group(MeshAxis axis, const MeshCoord& c) const;
  MeshShape shape_;
};

class Mesh {
 public:
  // Collective over `world` (every rank passes the same shape): validates the layout against
  // world.size() and splits one group per axis. Loader ranks take part but get no groups.
  static Result<Mesh> create(Communicator& world, const MeshShape& shape);

  const MeshLayout& layout() const { return layout_; }
  const MeshCoord& coord() const { return coord_; }
  bool is_loader() const { return coord_.loader; }

  // This rank's group along `axis`; must not be called on a loader rank.
  Communicator& group(MeshAxis axis) const;
  Communicator& pp() const { return group(MeshAxis::kPp); }
  Communicator& dp() const { return group(MeshAxis::kDp); }
  Communicator& cp() const { return group(MeshAxis::kCp); }
  Communicator& tp() const { return group(MeshAxis::kTp); }
  // dp x cp: where dense-weight gradients are reduced.
  Communicator& dp_cp() const { return group(MeshAxis::kDpCp); }
  Communicator& ep() const { return group(MeshAxis::kEp); }
  Communicator& edp() const { return group(MeshAxis::kEdp); }
  // All model ranks (the world without the loader ranks).
  Communicator& model() const { return group(MeshAxis::kModel); }

 private:
  Mesh(MeshLayout layout, MeshCoord coord) : layout_(layout), coord_(coord) {}

  MeshLayout layout_;
  MeshCoord coord_;
  std::array<std::unique_ptr<Communicator>, std::size(kAllMeshAxes)> groups_;
};

}  // namespace ms::comm
