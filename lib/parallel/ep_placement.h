// Which expert-parallel rank holds a tensor of a checkpoint, pure: the rule the trainer loads by
// and `ms-ckpt reshard --to ep=...` writes by, so the two cannot drift apart.
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

// The ep rank in [0, ep) holding tensor `name` of a model with `num_experts` experts per layer,
// or std::nullopt when every ep rank holds it (not a routed expert). InvalidArgument naming
// model.moe.num_experts and ep when ep < 1 or num_experts is not a positive multiple of ep (the
// rule needs experts to place), and naming the tensor when an expert name is malformed (not
// model.layers.<L>.block_sparse_moe.experts.<X>.{w1,w2,w3}.weight) or X >= num_experts.
Result<std::optional<int>> ep_rank_holding(std::string_view name, int64_t num_experts, int ep);

}  // namespace ms::parallel
