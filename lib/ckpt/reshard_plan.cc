// The offline reshard's plan (see reshard_plan.h): target keys, every tp rank's box of every
// tensor, the pipeline ranks and dp ranks (all, or an expert's ep group) holding it, and which
// target rank writes each piece.
#include "ckpt/reshard_plan.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "ckpt/zero_ownership.h"
#include "config/key_values.h"
#include "config/run_config.h"

namespace ms::ckpt {
namespace {

Result<int> parse_count(std::string_view key, std::string_view value) {
  int v = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec == std::errc::result_out_of_range) {
    return InvalidArgument("--to " + std::string(key) + "=" + std::string(value) +
                           ": out of range (at most " + std::to_string(kMaxReshardRanks) + ")");
  }
  if (ec != std::errc() || end != value.data() + value.size() || v < 0) {
    return InvalidArgument("--to " + std::string(key) + "=" + std::string(value) +
                           ": expected a non-negative whole number");
  }
  return v;
}

// "4+2" -> {4, 2}: layers per virtual stage. Whether they fit is pp_stage_layers' to say.
Result<std::vector<int64_t>> parse_layer_counts(std::string_view value) {
  std::vector<int64_t> counts;
  size_t start = 0;
  while (start <= value.size()) {
    const size_t plus = std::min(value.find('+', start), value.size());
    const std::string_view item = value.substr(start, plus - start);
    if (item.empty()) {
      return InvalidArgument("--to pp_layers=" + std::string(value) +
                             ": expected layer counts per virtual stage separated by '+', "
                             "e.g. pp_layers=4+2");
    }
    MS_ASSIGN_OR_RETURN(int count, parse_count("pp_layers", item));
    counts.push_back(count);
    start = plus + 1;
  }
  return counts;
}

Status apply_target_key(std::string_view key, int value, ReshardTarget& t) {
  if (key == "dp" || key == "tp" || key == "pp" || key == "vpp" || key == "ep") {
    if (value < 1) return InvalidArgument("--to " + std::string(key) + " must be at least 1");
    (key == "dp"   ? t.dp
     : key == "tp" ? t.tp
     : key == "pp" ? t.pp
     : key == "ep" ? t.ep
                   : t.vpp) = value;
  } else if (key == "zero") {
    if (value > 1) return InvalidArgument("--to zero must be 0 or 1");
    t.zero = value;
  } else {
    return InvalidArgument("--to: unknown key '" + std::string(key) +
                           "' (expected tp, dp, zero, pp, vpp, pp_layers, ep)");
  }
  return Status::OK();
}

Status apply_target_item(std::string_view key, std::string_view value, ReshardTarget& t) {
  if (key == "pp_layers") {
    MS_ASSIGN_OR_RETURN(t.pp_layers, parse_layer_counts(value));
    return Status::OK();
  }
  MS_ASSIGN_OR_RETURN(int v, parse_count(key, value));
  return apply_target_key(key, v, t);
}

std::vector<Box> bounded(const Box& box, DType dtype, uint64_t max_bytes) {
  const int64_t max_elements =
      std::max<int64_t>(1, static_cast<int64_t>(max_bytes / dtype_size(dtype)));
  return split_box(box, max_elements);
}

Box whole_box(const TensorRecord& t) {
  return Box{std::vector<int64_t>(t.global_shape.size(), 0), t.global_shape};
}

// One distinct box of a tensor and the tp ranks whose slice it is (all of them when the
// tensor is replicated over tp).
struct BoxGroup {
  Box box;
  std::vector<int> tp_ranks;
};

Result<Box> tp_box(const TensorRecord& t, const ReshardTarget& target,
                   const TpPlacement& placement, int tp_rank) {
  const std::string where = "--to tp=" + std::to_string(target.tp) + ": tensor \"" + t.name + "\"";
  if (!placement) {
    if (target.tp == 1) return whole_box(t);
    return InvalidArgument(where + ": no tensor-parallel placement rule was given");
  }
  Result<comm::ShardSpec> spec = placement(t.name, t.global_shape, target.tp, tp_rank);
  if (!spec.ok()) return spec.status().with_context(where);
  if (spec->global_shape() != t.global_shape || !spec->is_whole_box()) {
    return InvalidArgument(where + ": the placement rule gave " + spec->to_string() +
                           ", not a box of the tensor");
  }
  return Box{spec->offsets(), spec->lengths()};
}

// The tensor's distinct non-empty tp boxes, in order of their first tp rank. Empty boxes are
// left out because a manifest stores none (every shard holds at least one element): a tensor
// with no elements has no shards, as the Checkpointer saves it.
Result<std::vector<BoxGroup>> box_groups(const TensorRecord& t, const ReshardTarget& target,
                                         const TpPlacement& placement) {
  std::vector<BoxGroup> groups;
  for (int r = 0; r < target.tp; ++r) {
    MS_ASSIGN_OR_RETURN(Box box, tp_box(t, target, placement, r));
    if (box.numel() == 0) continue;
    auto same = std::find_if(groups.begin(), groups.end(),
                             [&](const BoxGroup& g) { return g.box == box; });
    if (same != groups.end()) {
      same->tp_ranks.push_back(r);
    } else {
      groups.push_back({std::move(box), {r}});
    }
  }
  return groups;
}

// Bytes each target rank writes so far; each piece goes to its least-loaded holder (the
// lowest rank on a tie), which spreads replicated tensors over the replicas.
class WriterLoad {
 public:
  explicit WriterLoad(int world) : bytes_(static_cast<size_t>(world), 0) {}

  void place(size_t tensor, const Box& box, const std::vector<int>& holders, DType dtype,
             uint64_t max_bytes, std::vector<PlannedShard>& out) {
    for (Box& piece : bounded(box, dtype, max_bytes)) {
      const int r = *std::min_element(holders.begin(), holders.end(), [&](int a, int b) {
        return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
      });
      bytes_[static_cast<size_t>(r)] += static_cast<uint64_t>(piece.numel()) * dtype_size(dtype);
      out.push_back({tensor, r, std::move(piece)});
    }
  }

 private:
  std::vector<uint64_t> bytes_;
};

// Target ranks (pp_rank * dp + dp_rank) * tp + tp_rank for the given pipeline, dp and tp
// ranks, ascending.
std::vector<int> holders_of(const std::vector<int>& pp_ranks, const std::vector<int>& dp_ranks,
                            const std::vector<int>& tp_ranks, const ReshardTarget& target) {
  std::vector<int> out;
  for (int p : pp_ranks) {
    for (int d : dp_ranks) {
      for (int r : tp_ranks) out.push_back((p * target.dp + d) * target.tp + r);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What the pipeline and expert rules need to know of the model, from the manifest's run config.
struct PlacementModel {
  int64_t n_layers = 0;
  bool tie_embeddings = false;
  int64_t num_experts = 0;
};

std::string target_where(const ReshardTarget& target) {
  return "--to " + reshard_target_string(target);
}

// The target's rank count (pp x dp x tp) and stage count (pp x vpp) size the plan's per-rank
// tables and are listed per box, so they are checked, without overflow, against
// kMaxReshardRanks before anything is sized by them.
Status check_target_size(const ReshardTarget& t) {
  for (const auto& [names, factors] :
       {std::pair<const char*, std::vector<int64_t>>{"pp * dp * tp", {t.pp, t.dp, t.tp}},
        {"pp * vpp", {t.pp, t.vpp}}}) {
    int64_t product = 1;
    bool overflow = false;
    std::string values;
    for (const int64_t f : factors) {
      overflow = overflow || __builtin_mul_overflow(product, f, &product);
      values += (values.empty() ? "" : " * ") + std::to_string(f);
    }
    if (!overflow && product <= kMaxReshardRanks) continue;
    return InvalidArgument("--to " + std::string(names) + " (" + values + ") " +
                           (overflow ? "overflows 64 bits" : "= " + std::to_string(product)) +
                           ": a target layout has at most " + std::to_string(kMaxReshardRanks) +
                           (std::string(names) == "pp * vpp" ? " pipeline stages" : " ranks"));
  }
  return Status::OK();
}

// A tp above every dimension of every tensor cannot split anything: each split tensor would be
// refused, and every tp rank would be visited for every tensor first. Refused up front, naming
// the largest dimension.
Status check_tp_fits_tensors(const Manifest& m, const ReshardTarget& t) {
  int64_t largest = 1;
  for (const TensorRecord& tensor : m.tensors) {
    for (const int64_t d : tensor.global_shape) largest = std::max(largest, d);
  }
  if (t.tp <= largest) return Status::OK();
  return InvalidArgument("--to tp=" + std::to_string(t.tp) + ": larger than every dimension of " +
                         "the checkpoint's tensors (the largest is " + std::to_string(largest) +
                         "), so no tensor can be split that many ways");
}

// The ep groups are dp_rank % ep, so ep must divide dp (as the Mesh requires).
Status check_ep_divides_dp(const ReshardTarget& t) {
  if (t.dp % t.ep == 0) return Status::OK();
  return InvalidArgument("--to ep=" + std::to_string(t.ep) + ",dp=" + std::to_string(t.dp) +
                         ": ep must divide dp (an ep group is ep consecutive dp ranks)");
}

Status check_experts(int64_t num_experts, const ReshardTarget& target) {
  if (num_experts > 0 && num_experts % target.ep == 0) return Status::OK();
  return InvalidArgument(target_where(target) + ": model.moe.num_experts " +
                         std::to_string(num_experts) + " is not a positive multiple of ep " +
                         std::to_string(target.ep) +
                         (num_experts == 0 ? " (a dense model has no experts to place)" : ""));
}

// 1 + the number N in `name` right after `marker` and before the next '.', or 0 when `name`
// holds no such number ("model.layers.3.mlp..." with marker "model.layers." gives 4).
int64_t count_after(std::string_view name, std::string_view marker) {
  const size_t at = name.find(marker);
  if (at == std::string_view::npos) return 0;
  const std::string_view rest = name.substr(at + marker.size());
  int64_t index = -1;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
  if (ec != std::errc() || end == rest.data() + rest.size() || *end != '.' || index < 0) return 0;
  return index == std::numeric_limits<int64_t>::max() ? index : index + 1;
}

// The run config recorded in the manifest decides where each tensor goes (model.n_layers cuts
// the pipeline stages, model.moe.num_experts assigns experts to ep ranks), so it must describe
// the tensors stored: a config claiming 8 experts where 4 are stored would put all 4 on the
// first half of the ep ranks, and 4e8 layers would put every layer on the first stage.
// Corruption naming the key, its value and what the tensors hold (Hugging Face Llama/Mixtral
// names: "model.layers.<L>.", ".block_sparse_moe.experts.<X>.").
Status check_config_matches_tensors(const Manifest& m, const PlacementModel& model,
                                    bool layers_used, bool experts_used) {
  int64_t layers = 0, experts = 0;
  for (const TensorRecord& t : m.tensors) {
    layers = std::max(layers, count_after(t.name, "model.layers."));
    experts = std::max(experts, count_after(t.name, ".block_sparse_moe.experts."));
  }
  if (layers_used && layers != model.n_layers) {
    return Corruption(
        "config_yaml: model.n_layers is " + std::to_string(model.n_layers) +
        " but the tensors hold " + std::to_string(layers) + " layers" +
        (layers > 0 ? " (model.layers.0 to model.layers." + std::to_string(layers - 1) + ")" : ""));
  }
  if (experts_used && experts != model.num_experts) {
    return Corruption("config_yaml: model.moe.num_experts is " + std::to_string(model.num_experts) +
                      " but the tensors hold " + std::to_string(experts) + " experts per layer");
  }
  return Status::OK();
}

// The model facts a pipelined or expert-parallel target needs; none otherwise.
Result<PlacementModel> placement_model(const Manifest& m, const ReshardTarget& target,
                                       const PpPlacement& pp_placement,
                                       const EpPlacement& ep_placement) {
  const std::string where = target_where(target);
  const bool experts = target.ep > 1;
  if (target.pipelined() && !pp_placement) {
    return InvalidArgument(where + ": no pipeline placement rule was given");
  }
  if (experts && !ep_placement) {
    return InvalidArgument(where + ": no expert placement rule was given");
  }
  if (!target.pipelined() && !experts) return PlacementModel{};
  if (m.config_yaml.empty()) {
    return InvalidArgument(where + ": the checkpoint records no run config, so its " +
                           (target.pipelined()
                                ? "model.n_layers (needed to cut pipeline stages)"
                                : "model.moe.num_experts (needed to place experts)") +
                           " is unknown");
  }
  Result<config::RunConfig> rc =
      config::run_config_from_yaml_text(m.config_yaml, "manifest.json config");
  if (!rc.ok()) return rc.status().with_context(where);
  const PlacementModel model{rc->model.n_layers, rc->model.tie_embeddings,
                             rc->model.moe.num_experts};
  MS_RETURN_IF_ERROR(check_config_matches_tensors(m, model, target.pipelined(), experts));
  if (experts) MS_RETURN_IF_ERROR(check_experts(model.num_experts, target));
  return model;
}

// The pipeline ranks holding tensor `t`: {0} unless the target is pipelined. The rule's errors
// name the tensor, or are about the cut as a whole.
Result<std::vector<int>> pipeline_holders(const TensorRecord& t, const ReshardTarget& target,
                                          const PpPlacement& pp_placement,
                                          const PlacementModel& model) {
  if (!target.pipelined()) return std::vector<int>{0};
  const std::string where =
      target_where(target) + " (model.n_layers " + std::to_string(model.n_layers) + ")";
  Result<std::vector<int>> ranks = pp_placement(t.name, model.n_layers, model.tie_embeddings,
                                                target.pp, target.vpp, target.pp_layers);
  if (!ranks.ok()) return ranks.status().with_context(where);
  const bool in_range = std::all_of(ranks->begin(), ranks->end(),
                                    [&](int p) { return p >= 0 && p < target.pp; });
  if (ranks->empty() || !in_range) {
    return InvalidArgument(where + ": tensor \"" + t.name + "\": the pipeline placement rule "
                           "gave no ranks, or ranks outside [0, " + std::to_string(target.pp) +
                           ")");
  }
  return ranks;
}

// The dp ranks holding tensor `t`, ascending: all of them, or for a routed expert of ep rank e
// its expert-data-parallel group, dp ranks e, e + ep, e + 2 ep, ... (edp rank = dp_rank / ep).
Result<std::vector<int>> dp_holders(const TensorRecord& t, const ReshardTarget& target,
                                    const EpPlacement& ep_placement,
                                    const PlacementModel& model) {
  std::optional<int> owner;
  if (target.ep > 1) {
    const std::string where = target_where(target) + " (model.moe.num_experts " +
                              std::to_string(model.num_experts) + ")";
    Result<std::optional<int>> rank = ep_placement(t.name, model.num_experts, target.ep);
    if (!rank.ok()) return rank.status().with_context(where);
    if (*rank && (**rank < 0 || **rank >= target.ep)) {
      return InvalidArgument(where + ": tensor \"" + t.name + "\": the expert placement rule "
                             "gave ep rank " + std::to_string(**rank) + ", outside [0, " +
                             std::to_string(target.ep) + ")");
    }
    owner = *rank;
  }
  std::vector<int> out;
  for (int d = 0; d < target.dp; ++d) {
    if (!owner || d % target.ep == *owner) out.push_back(d);
  }
  return out;
}

// Optimizer state under ZeRO: the j-th of the k holding dp ranks owns the flat range of the box
// that the ZeRO ownership rule (ckpt/zero_ownership.h, the trainer's too) gives rank j of k,
// decomposed into regular boxes; its tp replicas (when the box is shared over tp) and its peers
// on the other holding pipeline ranks (a tied embedding) share it.
void plan_flat_ranges(const TensorRecord& t, size_t index, const BoxGroup& g,
                      const std::vector<int>& pp_holders, const std::vector<int>& dp_ranks,
                      const ReshardTarget& target, uint64_t max_bytes, WriterLoad& load,
                      std::vector<PlannedShard>& out) {
  const comm::ShardSpec spec =
      comm::ShardSpec::box(t.global_shape, g.box.offsets, g.box.lengths).value();
  const int k = static_cast<int>(dp_ranks.size());
  for (int j = 0; j < k; ++j) {
    const ZeroRange owned = zero_owned_range(g.box.numel(), k, j);
    if (owned.length() == 0) continue;
    const std::vector<int> holders =
        holders_of(pp_holders, {dp_ranks[static_cast<size_t>(j)]}, g.tp_ranks, target);
    for (const LocalBox& lb : spec_boxes(spec.with_flat_range(owned.begin, owned.end).value())) {
      load.place(index, lb.box, holders, t.dtype, max_bytes, out);
    }
  }
}

}  // namespace

Result<ReshardTarget> parse_reshard_target(std::string_view text) {
  ReshardTarget t;
  MS_RETURN_IF_ERROR(config::parse_key_values(
      text, "--to",
      "tp=2,dp=2,zero=1 (pp_layers joins its counts with '+', e.g. pp_layers=4+2)",
      [&](std::string_view key, std::string_view value) {
        return apply_target_item(key, value, t);
      }));
  MS_RETURN_IF_ERROR(check_ep_divides_dp(t));
  MS_RETURN_IF_ERROR(check_target_size(t));
  return t;
}

std::string reshard_target_string(const ReshardTarget& t) {
  std::string s;
  if (t.pipelined()) {
    s = "pp=" + std::to_string(t.pp) + ",vpp=" + std::to_string(t.vpp) + ",";
    if (!t.pp_layers.empty()) {
      s += "pp_layers=";
      for (size_t i = 0; i < t.pp_layers.size(); ++i) {
        s += (i ? "+" : "") + std::to_string(t.pp_layers[i]);
      }
      s += ",";
    }
  }
  s += "tp=" + std::to_string(t.tp) + ",";
  if (t.ep > 1) s += "ep=" + std::to_string(t.ep) + ",";
  return s + "dp=" + std::to_string(t.dp) + ",zero=" + std::to_string(t.zero);
}

Result<std::vector<PlannedShard>> plan_reshard(const Manifest& m, const ReshardTarget& target,
                                               const TpPlacement& placement,
                                               const PpPlacement& pp_placement,
                                               const EpPlacement& ep_placement,
                                               uint64_t max_shard_bytes) {
  MS_RETURN_IF_ERROR(check_ep_divides_dp(target));
  MS_RETURN_IF_ERROR(check_target_size(target));
  MS_RETURN_IF_ERROR(check_tp_fits_tensors(m, target));
  MS_ASSIGN_OR_RETURN(const PlacementModel model,
                      placement_model(m, target, pp_placement, ep_placement));
  std::vector<PlannedShard> plan;
  WriterLoad load(target.world());
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorRecord& t = m.tensors[i];
    MS_ASSIGN_OR_RETURN(const std::vector<int> pp_holders,
                        pipeline_holders(t, target, pp_placement, model));
    MS_ASSIGN_OR_RETURN(const std::vector<int> dp_ranks,
                        dp_holders(t, target, ep_placement, model));
    MS_ASSIGN_OR_RETURN(const std::vector<BoxGroup> groups, box_groups(t, target, placement));
    const bool zero_sharded = target.zero == 1 && t.name.starts_with("optimizer.") &&
                              !t.global_shape.empty();
    for (const BoxGroup& g : groups) {
      if (zero_sharded && g.box.numel() >= static_cast<int64_t>(dp_ranks.size())) {
        plan_flat_ranges(t, i, g, pp_holders, dp_ranks, target, max_shard_bytes, load, plan);
      } else {
        load.place(i, g.box, holders_of(pp_holders, dp_ranks, g.tp_ranks, target), t.dtype,
                   max_shard_bytes, plan);
      }
    }
  }
  return plan;
}

}  // namespace ms::ckpt
