// The Mesh: how the world's ranks split into pipeline, data, tensor and expert parallel groups.
//
// Order (docs/comm.md): world = pp x dp x tp model ranks, tensor-parallel fastest,
//   rank = (pp_rank * dp + dp_rank) * tp + tp_rank,
// followed by `loaders` data-loader ranks that hold no model. Expert parallelism is carved out
// of dp: ep divides dp; within a dp group, ep consecutive dp ranks form an ep group (expert
// weights split across them) and the ranks with the same ep_rank across the dp group's
// dp / ep ep-groups form an expert-data-parallel (edp) group (expert weights replicated).
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
  int ep = 1;       // divides dp
  int loaders = 0;  // trailing data-loader ranks
};

// Where a model rank sits. ep is its rank in its ep group, edp its rank in its edp group.
struct MeshCoord {
  int pp = 0;
  int dp = 0;
  int tp = 0;
  int ep = 0;
  int edp = 0;
  bool loader = false;  // a data-loader rank: every other field is 0
};

enum class MeshAxis { kPp, kDp, kTp, kEp, kEdp, kModel };
inline constexpr MeshAxis kAllMeshAxes[] = {MeshAxis::kPp, MeshAxis::kDp,  MeshAxis::kTp,
                                            MeshAxis::kEp, MeshAxis::kEdp, MeshAxis::kModel};

// "pp", "dp", "tp", "ep", "edp", "model" (the group names communicators get).
std::string_view mesh_axis_name(MeshAxis axis);

class MeshLayout {
 public:
  // InvalidArgument when a size is < 1 (loaders < 0), ep does not divide dp, or world_size is
  // not pp * dp * tp + loaders (the message names all the sizes).
  static Result<MeshLayout> create(const MeshShape& shape, int world_size);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return model_size() + shape_.loaders; }
  int model_size() const { return shape_.pp * shape_.dp * shape_.tp; }
  bool is_loader(int rank) const { return rank >= model_size(); }

  // Coordinates of world rank `rank` (0 <= rank < world_size()).
  MeshCoord coord(int rank) const;
  // World rank of model coordinates (pp, dp, tp).
  int rank_of(int pp, int dp, int tp) const;
  // World ranks of the `axis` group that `rank` belongs to, ordered by rank within the group.
  // Empty for a loader rank.
  std::vector<int> group(MeshAxis axis, int rank) const;

 private:
  explicit MeshLayout(const MeshShape& shape) : shape_(shape) {}
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
  Communicator& tp() const { return group(MeshAxis::kTp); }
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
