// The tensor-parallel placement rule by tensor name (see tp_shards.h).
#include "parallel/tp_shards.h"

#include <algorithm>
#include <string>

#include "parallel/tp_layout.h"

namespace ms::parallel {
namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

// "optimizer.exp_avg.model.x" -> "model.x": optimizer state follows its parameter.
std::string_view parameter_name(std::string_view name) {
  constexpr std::string_view kOptimizer = "optimizer.";
  if (name.substr(0, kOptimizer.size()) != kOptimizer) return name;
  name.remove_prefix(kOptimizer.size());
  const size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

}  // namespace

std::string_view tp_split_name(TpSplit split) {
  switch (split) {
    case TpSplit::kReplicated: return "replicated";
    case TpSplit::kRows: return "rows";
    case TpSplit::kColumns: return "columns";
    case TpSplit::kVocab: return "vocab";
  }
  return "replicated";
}

TpSplit tp_split_of(std::string_view full_name) {
  const std::string_view name = parameter_name(full_name);
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return TpSplit::kVocab;
  if (!ends_with(name, ".weight")) return TpSplit::kReplicated;
  if (contains(name, ".self_attn.")) {
    if (ends_with(name, ".q_proj.weight") || ends_with(name, ".k_proj.weight") ||
        ends_with(name, ".v_proj.weight")) {
      return TpSplit::kRows;
    }
    if (ends_with(name, ".o_proj.weight")) return TpSplit::kColumns;
    return TpSplit::kReplicated;
  }
  if (contains(name, ".mlp.")) {  // the dense MLP and the MoE shared expert
    if (ends_with(name, ".gate_proj.weight") || ends_with(name, ".up_proj.weight")) {
      return TpSplit::kRows;
    }
    if (ends_with(name, ".down_proj.weight")) return TpSplit::kColumns;
    return TpSplit::kReplicated;
  }
  if (contains(name, ".block_sparse_moe.experts.")) {
    if (ends_with(name, ".w1.weight") || ends_with(name, ".w3.weight")) return TpSplit::kRows;
    if (ends_with(name, ".w2.weight")) return TpSplit::kColumns;
  }
  return TpSplit::kReplicated;  // norms, the router
}

Result<comm::ShardSpec> tp_shard(std::string_view name, const std::vector<int64_t>& global_shape,
                                 int tp, int rank) {
  if (tp < 1) return InvalidArgument("tensor parallelism needs tp >= 1, got " + std::to_string(tp));
  if (rank < 0 || rank >= tp) {
    return InvalidArgument("tp rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(tp) + ")");
  }
  const TpSplit split = tp_split_of(name);
  if (split == TpSplit::kReplicated || tp == 1) return comm::ShardSpec::replicated(global_shape);
  if (global_shape.size() != 2) {
    return InvalidArgument("tensor \"" + std::string(name) + "\" is split by tensor parallelism (" +
                           std::string(tp_split_name(split)) + ") and must be 2-D, but has " +
                           std::to_string(global_shape.size()) + " dimensions");
  }
  std::vector<int64_t> offsets{0, 0};
  std::vector<int64_t> lengths = global_shape;
  if (split == TpSplit::kVocab) {
    MS_ASSIGN_OR_RETURN(const VocabShard v, vocab_shard(global_shape[0], tp, rank));
    // A rank holding only padding gets the empty slice at the end of the real rows.
    offsets[0] = std::min(v.begin, v.vocab);
    lengths[0] = std::min(v.vocab, v.begin + v.length) - offsets[0];
  } else {
    const int dim = split == TpSplit::kRows ? 0 : 1;
    MS_ASSIGN_OR_RETURN(const TpSlice s,
                        tp_slice(global_shape[static_cast<size_t>(dim)], tp, rank,
                                 "dimension " + std::to_string(dim) + " of \"" +
                                     std::string(name) + "\""));
    offsets[static_cast<size_t>(dim)] = s.offset;
    lengths[static_cast<size_t>(dim)] = s.length;
  }
  return comm::ShardSpec::box(global_shape, offsets, lengths);
}

}  // namespace ms::parallel
