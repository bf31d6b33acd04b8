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

}  // namespace ms::parallel
