// Mesh coordinate arithmetic and group creation; see mesh.h for the rank order.
#include "comm/mesh.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace ms::comm {
namespace {

Status check_positive(const char* name, int value) {
  if (value >= 1) return Status::OK();
  return InvalidArgument(std::string("parallel.") + name + " must be >= 1, got " +
                         std::to_string(value));
}

}  // namespace

std::string_view mesh_axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kPp: return "pp";
    case MeshAxis::kDp: return "dp";
    case MeshAxis::kTp: return "tp";
    case MeshAxis::kEp: return "ep";
    case MeshAxis::kEdp: return "edp";
    case MeshAxis::kModel: return "model";
  }
  return "?";
}

Result<MeshLayout> MeshLayout::create(const MeshShape& shape, int world_size) {
  MS_RETURN_IF_ERROR(check_positive("pp", shape.pp));
  MS_RETURN_IF_ERROR(check_positive("dp", shape.dp));
  MS_RETURN_IF_ERROR(check_positive("tp", shape.tp));
  MS_RETURN_IF_ERROR(check_positive("ep", shape.ep));
  if (shape.loaders < 0) {
    return InvalidArgument("the number of data-loader ranks must be >= 0, got " +
                           std::to_string(shape.loaders));
  }
  if (shape.dp % shape.ep != 0) {
    return InvalidArgument("parallel.ep=" + std::to_string(shape.ep) +
                           " must divide parallel.dp=" + std::to_string(shape.dp) +
                           " (expert parallelism is carved out of data parallelism)");
  }
  const MeshLayout layout(shape);
  if (layout.world_size() != world_size) {
    return InvalidArgument("world size " + std::to_string(world_size) +
                           " does not match pp*dp*tp + loaders = " + std::to_string(shape.pp) +
                           "*" + std::to_string(shape.dp) + "*" + std::to_string(shape.tp) + " + " +
                           std::to_string(shape.loaders) + " = " +
                           std::to_string(layout.world_size()) +
                           "; launch that many ranks or change parallel.*");
  }
  return layout;
}

MeshCoord MeshLayout::coord(int rank) const {
  assert(rank >= 0 && rank < world_size());
  MeshCoord c;
  if (is_loader(rank)) {
    c.loader = true;
    return c;
  }
  c.tp = rank % shape_.tp;
  c.dp = (rank / shape_.tp) % shape_.dp;
  c.pp = rank / (shape_.tp * shape_.dp);
  c.ep = c.dp % shape_.ep;
  c.edp = c.dp / shape_.ep;
  return c;
}

int MeshLayout::rank_of(int pp, int dp, int tp) const {
  assert(pp >= 0 && pp < shape_.pp && dp >= 0 && dp < shape_.dp && tp >= 0 && tp < shape_.tp);
  return (pp * shape_.dp + dp) * shape_.tp + tp;
}

std::vector<int> MeshLayout::group(MeshAxis axis, int rank) const {
  std::vector<int> ranks;
  const MeshCoord c = coord(rank);
  if (c.loader) return ranks;
  switch (axis) {
    case MeshAxis::kPp:
      for (int p = 0; p < shape_.pp; ++p) ranks.push_back(rank_of(p, c.dp, c.tp));
      break;
    case MeshAxis::kDp:
      for (int d = 0; d < shape_.dp; ++d) ranks.push_back(rank_of(c.pp, d, c.tp));
      break;
    case MeshAxis::kTp:
      for (int t = 0; t < shape_.tp; ++t) ranks.push_back(rank_of(c.pp, c.dp, t));
      break;
    case MeshAxis::kEp:
      for (int e = 0; e < shape_.ep; ++e) {
        ranks.push_back(rank_of(c.pp, c.edp * shape_.ep + e, c.tp));
      }
      break;
    case MeshAxis::kEdp:
      for (int g = 0; g < shape_.dp / shape_.ep; ++g) {
        ranks.push_back(rank_of(c.pp, g * shape_.ep + c.ep, c.tp));
      }
      break;
    case MeshAxis::kModel:
      for (int r = 0; r < model_size(); ++r) ranks.push_back(r);
      break;
  }
  return ranks;
}

Result<Mesh> Mesh::create(Communicator& world, const MeshShape& shape) {
  MS_ASSIGN_OR_RETURN(MeshLayout layout, MeshLayout::create(shape, world.size()));
  const int rank = world.rank();
  Mesh mesh(layout, layout.coord(rank));
  for (size_t i = 0; i < std::size(kAllMeshAxes); ++i) {
    const MeshAxis axis = kAllMeshAxes[i];
    const std::vector<int> members = layout.group(axis, rank);
    // Each group is named by its lowest member; the key orders members as group() lists them.
    const int color = members.empty() ? Communicator::kNoColor : members.front();
    const auto position = std::find(members.begin(), members.end(), rank) - members.begin();
    MS_ASSIGN_OR_RETURN(mesh.groups_[i], world.split(color, static_cast<int>(position),
                                                     std::string(mesh_axis_name(axis))));
  }
  return mesh;
}

Communicator& Mesh::group(MeshAxis axis) const {
  assert(!is_loader() && "data-loader ranks belong to no model group");
  const size_t index = static_cast<size_t>(axis);
  return *groups_[index];
}

}  // namespace ms::comm
