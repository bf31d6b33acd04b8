// Expert ownership, pure and in one place: which routed experts an expert-parallel rank holds
// (the model builds its share by ep_local_experts) and which rank holds a tensor of a
// checkpoint (the rule the trainer loads by and `ms-ckpt reshard --to ep=...` writes by), so
// none of them can drift apart.
//
// With E experts per MoE layer and ep expert-parallel ranks, ep rank r holds the routed experts
// [r*E/ep, (r+1)*E/ep) of every layer: model.layers.L.block_sparse_moe.experts.X.{w1,w2,w3}.weight
// and their optimizer state optimizer.<moment>.<that name>. Every other tensor (the router
// block_sparse_moe.gate.weight, the shared expert mlp.shared_expert.*, attention, norms,
// embeddings) is held by every ep rank. Which dp ranks an ep rank is (dp_rank % ep) is the
// mesh's business (comm/mesh.h), not this rule's.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace ms::parallel {

// Whether the experts can be divided among ep ranks: num_experts a positive multiple of ep >= 1.
bool ep_divides_experts(int64_t num_experts, int ep);

// The routed experts of every MoE layer that ep rank `rank` holds: [first, first + count).
// Requires ep_divides_experts and 0 <= rank < ep (asserted).
struct ExpertRange {
  int64_t first = 0;
  int64_t count = 0;
};
ExpertRange ep_local_experts(int64_t num_experts, int ep, int rank);

// The ep rank in [0, ep) holding tensor `name` of a model with `num_experts` experts per layer,
// or std::nullopt when every ep rank holds it (not a routed expert). InvalidArgument naming
// model.moe.num_experts and ep when ep < 1 or num_experts is not a positive multiple of ep (the
// rule needs experts to place), and naming the tensor when an expert name is malformed (not
// model.layers.<L>.block_sparse_moe.experts.<X>.{w1,w2,w3}.weight) or X >= num_experts.
Result<std::optional<int>> ep_rank_holding(std::string_view name, int64_t num_experts, int ep);

}  // namespace ms::parallel
