// Mesh coordinate arithmetic and group creation; see mesh.h for the rank order.
#include "comm/mesh.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace ms::comm {
namespace {

// Mesh::group indexes its communicators by the enum value.
constexpr bool axes_in_declaration_order() {
  for (size_t i = 0; i < std::size(kAllMeshAxes); ++i) {
    if (static_cast<size_t>(kAllMeshAxes[i]) != i) return false;
  }
  return true;
}
static_assert(axes_in_declaration_order());

Status check_positive(const char* name, int value) {
  if (value >= 1) return Status::OK();
  return InvalidArgument(std::string("parallel.") + name + " must be >= 1, got " +
                         std::to_string(value));
}

// "parallel.dp=4", or "parallel.dp*cp=2*2=4" when cp is not 1, so a run without context
// parallelism is not told about it.
std::string folded_size(const MeshShape& shape) {
  if (shape.cp == 1) return "parallel.dp=" + std::to_string(shape.dp);
  return "parallel.dp*cp=" + std::to_string(shape.dp) + "*" + std::to_string(shape.cp) + "=" +
         std::to_string(shape.dp * shape.cp);
}

// "pp*dp*tp + loaders = 2*2*2 + 0 = 8", with cp between dp and tp when it is not 1.
std::string world_size_formula(const MeshShape& shape) {
  const bool cp = shape.cp != 1;
  return std::string(cp ? "pp*dp*cp*tp" : "pp*dp*tp") + " + loaders = " +
         std::to_string(shape.pp) + "*" + std::to_string(shape.dp) + "*" +
         (cp ? std::to_string(shape.cp) + "*" : "") + std::to_string(shape.tp) + " + " +
         std::to_string(shape.loaders) + " = " + std::to_string(shape.world_size());
}

}  // namespace

std::string_view mesh_axis_name(MeshAxis axis) {
  switch (axis) {
    case MeshAxis::kPp: return "pp";
    case MeshAxis::kDp: return "dp";
    case MeshAxis::kCp: return "cp";
    case MeshAxis::kTp: return "tp";
    case MeshAxis::kDpCp: return "dp_cp";
    case MeshAxis::kEp: return "ep";
    case MeshAxis::kEdp: return "edp";
    case MeshAxis::kModel: return "model";
  }
  return "?";
}

Result<MeshLayout> MeshLayout::create(const MeshShape& shape, int world_size) {
  MS_RETURN_IF_ERROR(check_positive("pp", shape.pp));
  MS_RETURN_IF_ERROR(check_positive("dp", shape.dp));
  MS_RETURN_IF_ERROR(check_positive("cp", shape.cp));
  MS_RETURN_IF_ERROR(check_positive("tp", shape.tp));
  MS_RETURN_IF_ERROR(check_positive("ep", shape.ep));
  if (shape.loaders < 0) {
    return InvalidArgument("the number of data-loader ranks must be >= 0, got " +
                           std::to_string(shape.loaders));
  }
  if ((shape.dp * shape.cp) % shape.ep != 0) {
    return InvalidArgument("parallel.ep=" + std::to_string(shape.ep) + " must divide " +
                           folded_size(shape) + " (expert parallelism is carved out of data" +
                           (shape.cp == 1 ? "" : " x context") + " parallelism)");
  }
  if (shape.world_size() != world_size) {
    return InvalidArgument("world size " + std::to_string(world_size) + " does not match " +
                           world_size_formula(shape) +
                           "; launch that many ranks or change parallel.*");
  }
  return MeshLayout(shape);
}

MeshCoord MeshLayout::coord(int rank) const {
  assert(rank >= 0 && rank < world_size());
  MeshCoord c;
  if (is_loader(rank)) {
    c.loader = true;
    return c;
  }
  c.tp = rank % shape_.tp;
  c.dp_cp = (rank / shape_.tp) % (shape_.dp * shape_.cp);
  c.pp = rank / (shape_.tp * shape_.dp * shape_.cp);
  c.cp = c.dp_cp % shape_.cp;
  c.dp = c.dp_cp / shape_.cp;
  c.ep = c.dp_cp % shape_.ep;
  c.edp = c.dp_cp / shape_.ep;
  return c;
}

int MeshLayout::rank_of(int pp, int dp, int cp, int tp) const {
  assert(dp >= 0 && dp < shape_.dp && cp >= 0 && cp < shape_.cp);
  return rank_of_dp_cp(pp, dp * shape_.cp + cp, tp);
}

int MeshLayout::rank_of_dp_cp(int pp, int dp_cp, int tp) const {
  assert(pp >= 0 && pp < shape_.pp && dp_cp >= 0 && dp_cp < shape_.dp * shape_.cp && tp >= 0 &&
         tp < shape_.tp);
  return (pp * shape_.dp * shape_.cp + dp_cp) * shape_.tp + tp;
}

std::vector<int> MeshLayout::single_axis_group(MeshAxis axis, const MeshCoord& c) const {
  std::vector<int> ranks;
  switch (axis) {
    case MeshAxis::kPp:
      for (int p = 0; p < shape_.pp; ++p) ranks.push_back(rank_of(p, c.dp, c.cp, c.tp));
      break;
    case MeshAxis::kDp:
      for (int d = 0; d < shape_.dp; ++d) ranks.push_back(rank_of(c.pp, d, c.cp, c.tp));
      break;
    case MeshAxis::kCp:
      for (int k = 0; k < shape_.cp; ++k) ranks.push_back(rank_of(c.pp, c.dp, k, c.tp));
      break;
    case MeshAxis::kTp:
      for (int t = 0; t < shape_.tp; ++t) ranks.push_back(rank_of(c.pp, c.dp, c.cp, t));
      break;
    default: assert(false && "not a single-axis group");
  }
  return ranks;
}

std::vector<int> MeshLayout::folded_group(MeshAxis axis, const MeshCoord& c) const {
  const int folded = shape_.dp * shape_.cp;
  std::vector<int> ranks;
  switch (axis) {
    case MeshAxis::kDpCp:
      for (int i = 0; i < folded; ++i) ranks.push_back(rank_of_dp_cp(c.pp, i, c.tp));
      break;
    case MeshAxis::kEp:
      for (int e = 0; e < shape_.ep; ++e) {
        ranks.push_back(rank_of_dp_cp(c.pp, c.edp * shape_.ep + e, c.tp));
      }
      break;
    case MeshAxis::kEdp:
      for (int g = 0; g < folded / shape_.ep; ++g) {
        ranks.push_back(rank_of_dp_cp(c.pp, g * shape_.ep + c.ep, c.tp));
      }
      break;
    default: assert(false && "not a group along dp x cp");
  }
  return ranks;
}

std::vector<int> MeshLayout::group(MeshAxis axis, int rank) const {
  const MeshCoord c = coord(rank);
  if (c.loader) return {};
  switch (axis) {
    case MeshAxis::kPp:
    case MeshAxis::kDp:
    case MeshAxis::kCp:
    case MeshAxis::kTp: return single_axis_group(axis, c);
    case MeshAxis::kDpCp:
    case MeshAxis::kEp:
    case MeshAxis::kEdp: return folded_group(axis, c);
    case MeshAxis::kModel: break;
  }
  std::vector<int> ranks(static_cast<size_t>(model_size()));
  for (int r = 0; r < model_size(); ++r) ranks[static_cast<size_t>(r)] = r;
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
