// Vocabulary-parallel embedding and cross-entropy (vocab_parallel.h). Per-row sums are taken in
// double, as in ops::softmax_cross_entropy, and cross tp as fp32.
#include "parallel/vocab_parallel.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/parallel.h"

namespace ms::parallel {

namespace {

// The (rows, width) rows of the whole sequence block from this rank's (rows / tp, width) rows
// under sequence parallelism (tp divides rows: check_vocab_embedding checked it).
Result<std::vector<float>> gather_sequence(comm::Communicator& tp, const float* x, int64_t rows,
                                           int64_t width) {
  std::vector<float> full(static_cast<size_t>(rows * width));
  const size_t block = full.size() / static_cast<size_t>(tp.size());
  MS_RETURN_IF_ERROR(tp.allgather(x, full.data(), block, DType::kF32));
  return full;
}

void assert_matches(const VocabShard& shard, const comm::Communicator& tp) {
  assert(shard.tp == tp.size() && shard.rank == tp.rank());
  (void)shard;
  (void)tp;
}

// out: (n, d) = table row of ids[i] when this rank holds it, else zero.
void local_lookup(const VocabShard& shard, const int32_t* ids, const float* table, float* out,
                  int64_t n, int64_t d) {
  ops::parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* row = out + i * d;
      if (shard.holds(ids[i])) {
        std::memcpy(row, table + (ids[i] - shard.begin) * d, sizeof(float) * d);
      } else {
        std::memset(row, 0, sizeof(float) * d);
      }
    }
  }, 16);
}

// Split by columns so each table element is summed by one task in token order (deterministic
// whatever the thread count, like ops::embedding_backward).
void local_scatter_add(const VocabShard& shard, const int32_t* ids, const float* dout,
                       float* dtable, int64_t n, int64_t d) {
  ops::parallel_for(d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      if (!shard.holds(ids[i])) continue;
      float* row = dtable + (ids[i] - shard.begin) * d;
      const float* g = dout + i * d;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }, 64);
}

// Max over the real columns of each local row; -inf on a rank holding only padding.
std::vector<float> local_row_max(const VocabShard& shard, const float* logits, int64_t ld,
                                 int64_t n) {
  const int64_t real = shard.real_end() - shard.begin;
  std::vector<float> max(static_cast<size_t>(n), -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < n; ++i) {
    const float* row = logits + i * ld;
    for (int64_t j = 0; j < real; ++j) max[i] = std::max(max[i], row[j]);
  }
  return max;
}

// pairs[2i] = sum of exp(logit - max[i]) over the real local columns; pairs[2i+1] = the target
// logit when this rank holds the target, else 0 (so the SUM over tp is the target logit).
std::vector<float> local_sums(const VocabShard& shard, const float* logits, int64_t ld,
                              const int32_t* targets, const std::vector<float>& max, int64_t n) {
  const int64_t real = shard.real_end() - shard.begin;
  std::vector<float> pairs(static_cast<size_t>(2 * n), 0.0f);
  ops::parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      const float* row = logits + i * ld;
      double sum = 0;
      for (int64_t j = 0; j < real; ++j) sum += std::exp(row[j] - max[i]);
      pairs[2 * i] = static_cast<float>(sum);
      if (shard.holds(targets[i])) pairs[2 * i + 1] = row[targets[i] - shard.begin];
    }
  }, 4);
  return pairs;
}

// Overwrites row i's local columns with grad_scale * (softmax - onehot); padding gets zero.
void write_local_grad(const VocabShard& shard, float* logits, int64_t ld,
                      const int32_t* targets, const std::vector<float>& lse, int64_t n,
                      float grad_scale) {
  const int64_t real = shard.real_end() - shard.begin;
  ops::parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* row = logits + i * ld;
      for (int64_t j = 0; j < real; ++j) row[j] = grad_scale * std::exp(row[j] - lse[i]);
      for (int64_t j = real; j < ld; ++j) row[j] = 0.0f;
      if (shard.holds(targets[i])) row[targets[i] - shard.begin] -= grad_scale;
    }
  }, 4);
}

}  // namespace

Status check_vocab_embedding(const VocabEmbeddingShape& shape, int tp) {
  if (shape.rows < 0 || shape.dim < 1) {
    return InvalidArgument("vocabulary-parallel embedding needs rows >= 0 and dim >= 1, got rows " +
                           std::to_string(shape.rows) + ", dim " + std::to_string(shape.dim));
  }
  if (!shape.sequence_parallel) return Status::OK();
  return tp_slice(shape.rows, tp, 0, "the rows (tokens) under sequence parallelism").status();
}

Status vocab_parallel_embedding_forward(comm::Communicator& tp, const VocabShard& shard,
                                        const VocabEmbeddingShape& shape, const int32_t* ids,
                                        const float* table, float* out) {
  assert_matches(shard, tp);
  MS_RETURN_IF_ERROR(check_vocab_embedding(shape, tp.size()));
  std::vector<float> partial(static_cast<size_t>(shape.rows * shape.dim));
  local_lookup(shard, ids, table, partial.data(), shape.rows, shape.dim);
  if (!shape.sequence_parallel) {
    return tp.allreduce(partial.data(), out, partial.size(), DType::kF32, comm::ReduceOp::kSum);
  }
  return tp.reduce_scatter(partial.data(), out, partial.size() / static_cast<size_t>(tp.size()),
                           DType::kF32, comm::ReduceOp::kSum);
}

Status vocab_parallel_embedding_backward(comm::Communicator& tp, const VocabShard& shard,
                                         const VocabEmbeddingShape& shape, const int32_t* ids,
                                         const float* dout, float* dtable) {
  assert_matches(shard, tp);
  MS_RETURN_IF_ERROR(check_vocab_embedding(shape, tp.size()));
  std::vector<float> dout_full;
  if (shape.sequence_parallel) {
    MS_ASSIGN_OR_RETURN(dout_full, gather_sequence(tp, dout, shape.rows, shape.dim));
  }
  local_scatter_add(shard, ids, shape.sequence_parallel ? dout_full.data() : dout, dtable,
                    shape.rows, shape.dim);
  return Status::OK();
}

Status vocab_parallel_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                    float* logits, const int32_t* targets, float* losses,
                                    int64_t n, float grad_scale, bool write_grad) {
  return vocab_parallel_cross_entropy(tp, shard, logits, shard.length, targets, losses, n,
                                      grad_scale, write_grad);
}

Status vocab_parallel_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                    float* logits, int64_t ld, const int32_t* targets,
                                    float* losses, int64_t n, float grad_scale,
                                    bool write_grad) {
  assert_matches(shard, tp);
  if (n < 0) return InvalidArgument("cross-entropy needs rows >= 0, got " + std::to_string(n));
  const int64_t real = shard.real_end() - shard.begin;
  if (ld < real || ld > shard.length) {
    return InvalidArgument("cross-entropy logits row stride " + std::to_string(ld) +
                           " must lie between the real columns held (" + std::to_string(real) +
                           ") and the padded shard (" + std::to_string(shard.length) + ")");
  }
  std::vector<float> max = local_row_max(shard, logits, ld, n);
  MS_RETURN_IF_ERROR(tp.allreduce(max.data(), max.data(), max.size(), DType::kF32,
                                  comm::ReduceOp::kMax));
  std::vector<float> pairs = local_sums(shard, logits, ld, targets, max, n);
  MS_RETURN_IF_ERROR(tp.allreduce(pairs.data(), pairs.data(), pairs.size(), DType::kF32,
                                  comm::ReduceOp::kSum));
  std::vector<float> lse(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const double row_lse = max[i] + std::log(static_cast<double>(pairs[2 * i]));
    lse[i] = static_cast<float>(row_lse);
    losses[i] = static_cast<float>(row_lse - pairs[2 * i + 1]);
  }
  if (write_grad) write_local_grad(shard, logits, ld, targets, lse, n, grad_scale);
  return Status::OK();
}

}  // namespace ms::parallel
