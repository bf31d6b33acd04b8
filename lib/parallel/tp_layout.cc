// Even tp splits and vocabulary padding.
#include "parallel/tp_layout.h"

#include <algorithm>
#include <cassert>
#include <string>

namespace ms::parallel {

namespace {

Status check_rank(int tp, int rank) {
  if (tp < 1) return InvalidArgument("tensor parallelism needs tp >= 1, got " + std::to_string(tp));
  if (rank < 0 || rank >= tp) {
    return InvalidArgument("tp rank " + std::to_string(rank) + " is outside [0, " +
                           std::to_string(tp) + ")");
  }
  return Status::OK();
}

// InvalidArgument unless tp divides `size`, the value of config key `key`; `why` says what is
// split whole.
Status check_divides(int tp, int64_t size, std::string_view key, std::string_view why) {
  if (size % tp == 0) return Status::OK();
  return InvalidArgument(std::string(key) + ": tensor parallelism splits " + std::string(why) +
                         ", so tp (" + std::to_string(tp) + ") must divide " +
                         std::string(key) + " (" + std::to_string(size) + ")");
}

Status check_positive(int64_t size, std::string_view key) {
  if (size >= 1) return Status::OK();
  return InvalidArgument(std::string(key) + " must be >= 1, got " + std::to_string(size));
}

}  // namespace

Result<TpSlice> tp_slice(int64_t global, int tp, int rank, std::string_view what) {
  MS_RETURN_IF_ERROR(check_rank(tp, rank));
  if (global < 0) {
    return InvalidArgument(std::string(what) + " is negative (" + std::to_string(global) + ")");
  }
  if (global % tp != 0) {
    return InvalidArgument("tensor parallelism splits " + std::string(what) +
                           " evenly: tp (" + std::to_string(tp) + ") must divide " +
                           std::string(what) + " (" + std::to_string(global) + ")");
  }
  const int64_t length = global / tp;
  return TpSlice{rank * length, length};
}

int64_t padded_vocab(int64_t vocab, int tp) {
  assert(vocab >= 1 && tp >= 1);
  return (vocab + tp - 1) / tp * tp;
}

int64_t VocabShard::real_end() const { return std::clamp(vocab, begin, begin + length); }

Result<VocabShard> vocab_shard(int64_t vocab, int tp, int rank) {
  MS_RETURN_IF_ERROR(check_rank(tp, rank));
  if (vocab < 1) {
    return InvalidArgument("vocabulary size must be >= 1, got " + std::to_string(vocab));
  }
  VocabShard shard;
  shard.vocab = vocab;
  shard.padded = padded_vocab(vocab, tp);
  shard.length = shard.padded / tp;
  shard.begin = rank * shard.length;
  shard.tp = tp;
  shard.rank = rank;
  return shard;
}

Status check_tp_heads(int64_t n_heads, int64_t n_kv_heads, int tp) {
  if (tp < 1) return InvalidArgument("tensor parallelism needs tp >= 1, got " + std::to_string(tp));
  MS_RETURN_IF_ERROR(check_positive(n_heads, "model.n_heads"));
  MS_RETURN_IF_ERROR(check_positive(n_kv_heads, "model.n_kv_heads"));
  if (n_heads % n_kv_heads != 0) {
    return InvalidArgument("model.n_kv_heads (" + std::to_string(n_kv_heads) +
                           ") must divide model.n_heads (" + std::to_string(n_heads) +
                           "): each key/value head serves a whole group of query heads");
  }
  // n_heads first: once tp divides it, a grouped-query layout (n_kv_heads < n_heads) can still
  // fail on the key/value heads, and that message names them.
  MS_RETURN_IF_ERROR(check_divides(tp, n_heads, "model.n_heads", "the query heads whole"));
  return check_divides(tp, n_kv_heads, "model.n_kv_heads",
                       "the key/value heads whole so that each rank holds whole query groups");
}

Status check_tp_d_ff(int64_t d_ff, std::string_view key, int tp) {
  if (tp < 1) return InvalidArgument("tensor parallelism needs tp >= 1, got " + std::to_string(tp));
  MS_RETURN_IF_ERROR(check_positive(d_ff, key));
  return check_divides(tp, d_ff, key, "the MLP's hidden width evenly");
}

Status check_tp_model(const TpModelDims& dims, int tp) {
  MS_RETURN_IF_ERROR(check_tp_heads(dims.n_heads, dims.n_kv_heads, tp));
  MS_RETURN_IF_ERROR(check_tp_d_ff(dims.d_ff, "model.d_ff", tp));
  if (dims.shared_expert_d_ff < 0) {
    return InvalidArgument("model.moe.shared_expert_d_ff must be >= 0, got " +
                           std::to_string(dims.shared_expert_d_ff));
  }
  if (dims.shared_expert_d_ff == 0) return Status::OK();
  return check_tp_d_ff(dims.shared_expert_d_ff, "model.moe.shared_expert_d_ff", tp);
}

}  // namespace ms::parallel
