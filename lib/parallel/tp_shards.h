// Which slice of each model tensor a tensor-parallel rank holds, by the tensor's Hugging Face
// name: the one rule the trainer (lib/model builds its parameters with it), the checkpoint tools
// (`ms-ckpt reshard --to tp=N`) and the dry-run layout print share. Pure: no MPI.
//
//   column-parallel (rows of the (out, in) weight split):   self_attn.{q,k,v}_proj,
//       mlp.{gate,up}_proj (dense and the shared expert), block_sparse_moe.experts.E.{w1,w3}
//   row-parallel (columns split):   self_attn.o_proj, mlp.down_proj (dense and shared expert),
//       block_sparse_moe.experts.E.w2
//   vocabulary-parallel (rows = token ids split over the padded vocabulary):
//       model.embed_tokens.weight, lm_head.weight
//   replicated: every norm weight and the MoE router (block_sparse_moe.gate.weight).
//
// Optimizer state named "optimizer.<moment>.<parameter>" follows its parameter's rule.
//
// The vocabulary split: the vocabulary V is padded to Vp, the smallest multiple of tp, and tp
// rank r is given ids [r Vp/tp, (r+1) Vp/tp); it holds the real ones among them, rows
// [r Vp/tp, min(V, (r+1) Vp/tp)) of the (V, d) tensor. Padded ids are never stored: they would
// be rows of zeros whose only effect is to be masked out again, and a tensor stored without
// them cannot carry padding into a checkpoint, an export or generation. A rank may hold no
// rows at all (V = 5, tp = 4: rank 3's ids 6 and 7 are padding).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/shard_spec.h"
#include "core/status.h"

namespace ms::parallel {

enum class TpSplit {
  kReplicated,  // every tp rank holds the whole tensor
  kRows,        // dimension 0 split evenly (column-parallel weights)
  kColumns,     // dimension 1 split evenly (row-parallel weights)
  kVocab,       // dimension 0 split over the padded vocabulary (see above)
};

// "replicated", "rows", "columns", "vocab".
std::string_view tp_split_name(TpSplit split);

// The rule for tensor `name` (a parameter or "optimizer.exp_avg.<parameter>" style name).
// Unknown names are replicated.
TpSplit tp_split_of(std::string_view name);

// The slice of tensor `name` of shape `global_shape` that tp rank `rank` of `tp` holds.
// InvalidArgument when tp < 1, rank is outside [0, tp), a split tensor is not 2-D, or tp does
// not divide the split dimension (rows and columns are split evenly; the message names the
// tensor, both sizes and the rule).
Result<comm::ShardSpec> tp_shard(std::string_view name, const std::vector<int64_t>& global_shape,
                                 int tp, int rank);

}  // namespace ms::parallel
