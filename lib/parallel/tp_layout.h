// Tensor-parallel layout arithmetic, free of MPI: which contiguous slice of a dimension a tp
// rank holds, and how the vocabulary is padded so that tp divides it.
//
// Tensor parallelism here splits evenly or not at all. An uneven split (comm::ShardSpec's rule
// gives the first L % n parts one more element) would give ranks GEMMs and collectives of
// different sizes; refusing it up front, with the rule in the message, is what users of other
// trainers asked for after silent uneven splits. The vocabulary is the exception: it is padded
// to a multiple of tp inside the run, and the padding is masked out of every result.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ms::parallel {

// Elements [offset, offset + length) of a split dimension.
struct TpSlice {
  int64_t offset = 0;
  int64_t length = 0;
  bool operator==(const TpSlice&) const = default;
};

// Rank `rank`'s slice when a dimension of `global` elements is split evenly over `tp` ranks:
// {rank * global / tp, global / tp}. `what` names the dimension in errors ("d_ff",
// "out_features"). InvalidArgument when tp < 1, rank is outside [0, tp), global < 0, or tp does
// not divide global (the message names what, both sizes and the rule).
Result<TpSlice> tp_slice(int64_t global, int tp, int rank, std::string_view what);

// The smallest multiple of tp that is >= vocab (vocab >= 1, tp >= 1, asserted).
int64_t padded_vocab(int64_t vocab, int tp);

// A tp rank's range of the padded vocabulary: rows [begin, begin + length) of the padded
// embedding table, columns of the same range of the logits. Ids >= vocab are padding.
struct VocabShard {
  int64_t vocab = 0;   // the real vocabulary size
  int64_t padded = 0;  // padded_vocab(vocab, tp)
  int64_t begin = 0;   // first padded id held here: rank * padded / tp
  int64_t length = 0;  // padded / tp
  int tp = 1;
  int rank = 0;

  // Ids of real tokens held here: [begin, real_end()) (empty on a rank holding only padding).
  int64_t real_end() const;
  bool holds(int64_t id) const { return id >= begin && id < begin + length; }
};

// InvalidArgument when vocab < 1, tp < 1 or rank is outside [0, tp).
Result<VocabShard> vocab_shard(int64_t vocab, int tp, int rank);

// The model sizes tensor parallelism splits, under their config keys.
struct TpModelDims {
  int64_t n_heads = 0;             // model.n_heads: query heads, split whole
  int64_t n_kv_heads = 0;          // model.n_kv_heads: key/value heads, split whole
  int64_t d_ff = 0;                // model.d_ff: the MLP's (and each expert's) hidden width
  int64_t shared_expert_d_ff = 0;  // model.moe.shared_expert_d_ff; 0: no shared expert
};

// The layout rule, pure so that every rank reaches the same verdict before any compute:
// tp must divide model.n_heads, model.n_kv_heads (each rank holds whole key/value heads and so
// whole query groups), model.d_ff and a nonzero model.moe.shared_expert_d_ff. Also refuses
// tp < 1, sizes < 1 (shared_expert_d_ff < 0) and n_kv_heads not dividing n_heads. The first
// broken rule is returned as InvalidArgument naming the key, both sizes and the rule.
Status check_tp_model(const TpModelDims& dims, int tp);

// The parts of check_tp_model one block needs: the head rule (attention) and the hidden-width
// rule for the config key `key` (an MLP: "model.d_ff" or "model.moe.shared_expert_d_ff").
Status check_tp_heads(int64_t n_heads, int64_t n_kv_heads, int tp);
Status check_tp_d_ff(int64_t d_ff, std::string_view key, int tp);

}  // namespace ms::parallel
