// Which pipeline ranks hold a tensor of a checkpoint (issue 13), pure: the rule the trainer
// loads by and `ms-ckpt reshard --to pp=...` writes by, so the two cannot drift apart.
//
// Virtual stages S = pp * vpp; pipeline rank r holds chunks c = 0..vpp-1, chunk c being virtual
// stage s = c * pp + r (so stage s lives on rank s % pp). Layers are cut by pp_stage_layers.
// model.embed_tokens.weight belongs to stage 0 (and, with tied embeddings, also to stage S - 1,
// which uses it as the output layer); model.layers.L.* to the stage whose layers hold L;
// model.norm.weight and lm_head.weight to stage S - 1; optimizer.<moment>.<parameter> follows
// its parameter.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::parallel {

// The virtual stages holding tensor `name`, ascending and distinct: a parameter
// ("model.layers.3.self_attn.q_proj.weight") or its optimizer state
// ("optimizer.exp_avg.<parameter>"). InvalidArgument for a name outside the patterns above, a
// layer index at or past n_layers, or a cut pp_stage_layers refuses (its message).
Result<std::vector<int>> pp_stages_holding(std::string_view name, int64_t n_layers,
                                           bool tie_embeddings, int pp, int vpp,
                                           const std::vector<int64_t>& explicit_counts);

// The pipeline ranks holding tensor `name` (the ranks of pp_stages_holding's stages), ascending
// and distinct, each in [0, pp). Same errors.
Result<std::vector<int>> pp_ranks_holding(std::string_view name, int64_t n_layers,
                                          bool tie_embeddings, int pp, int vpp,
                                          const std::vector<int64_t>& explicit_counts);

}  // namespace ms::parallel
