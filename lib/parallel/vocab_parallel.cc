// Vocabulary-parallel embedding and cross-entropy (vocab_parallel.h): the local work is the
// backend's (ops/embedding.h, ops/cross_entropy.h), the exchanges are here. Per-row sums are
// taken in double, as in ops::softmax_cross_entropy, and cross tp as fp32; the RL log-probs'
// sums (vocab_parallel_log_probs, on the host) cross as doubles.
#include "parallel/vocab_parallel.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ops/device_array.h"

namespace ms::parallel {

namespace {

// The (rows, width) rows of the whole sequence block from this rank's (rows / tp, width) rows
// under sequence parallelism (tp divides rows: check_vocab_embedding checked it).
Status gather_sequence(comm::Communicator& tp, ops::Backend& be, const float* x, int64_t rows,
                       int64_t width, ops::DeviceArray& full) {
  full.resize(be, static_cast<size_t>(rows * width));
  const size_t block = full.size() / static_cast<size_t>(tp.size());
  return tp.allgather(x, full.data(), block, DType::kF32);
}

void assert_matches(const VocabShard& shard, const comm::Communicator& tp) {
  assert(shard.tp == tp.size() && shard.rank == tp.rank());
  (void)shard;
  (void)tp;
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
                                        const float* table, float* out, ops::Backend& be) {
  assert_matches(shard, tp);
  MS_RETURN_IF_ERROR(check_vocab_embedding(shape, tp.size()));
  ops::DeviceArray partial;
  partial.resize(be, static_cast<size_t>(shape.rows * shape.dim));
  be.embedding_forward_range(ids, table, partial.data(), shape.rows, shape.dim, shard.begin,
                             shard.length);
  if (!shape.sequence_parallel) {
    return tp.allreduce(partial.data(), out, partial.size(), DType::kF32, comm::ReduceOp::kSum);
  }
  return tp.reduce_scatter(partial.data(), out, partial.size() / static_cast<size_t>(tp.size()),
                           DType::kF32, comm::ReduceOp::kSum);
}

Status vocab_parallel_embedding_backward(comm::Communicator& tp, const VocabShard& shard,
                                         const VocabEmbeddingShape& shape, const int32_t* ids,
                                         const float* dout, float* dtable, ops::Backend& be) {
  assert_matches(shard, tp);
  MS_RETURN_IF_ERROR(check_vocab_embedding(shape, tp.size()));
  ops::DeviceArray dout_full;
  if (shape.sequence_parallel) {
    MS_RETURN_IF_ERROR(gather_sequence(tp, be, dout, shape.rows, shape.dim, dout_full));
  }
  be.embedding_backward_range(ids, shape.sequence_parallel ? dout_full.data() : dout, dtable,
                              shape.rows, shape.dim, shard.begin, shard.length);
  return Status::OK();
}

Status vocab_parallel_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                    float* logits, const int32_t* targets, float* losses,
                                    int64_t n, float grad_scale, bool write_grad,
                                    ops::Backend& be) {
  return vocab_parallel_cross_entropy(tp, shard, logits, shard.length, targets, losses, n,
                                      grad_scale, write_grad, be);
}

Status vocab_parallel_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                    float* logits, int64_t ld, const int32_t* targets,
                                    float* losses, int64_t n, float grad_scale,
                                    bool write_grad, ops::Backend& be) {
  assert_matches(shard, tp);
  if (n < 0) return InvalidArgument("cross-entropy needs rows >= 0, got " + std::to_string(n));
  const int64_t real = shard.real_end() - shard.begin;
  if (ld < real || ld > shard.length) {
    return InvalidArgument("cross-entropy logits row stride " + std::to_string(ld) +
                           " must lie between the real columns held (" + std::to_string(real) +
                           ") and the padded shard (" + std::to_string(shard.length) + ")");
  }
  // Per row: the max, then (sum of exponentials, target logit) pairs, then the log-sum-exp;
  // only these (n)-sized vectors cross tp.
  ops::DeviceArray max, pairs, lse;
  max.resize(be, static_cast<size_t>(n));
  pairs.resize(be, static_cast<size_t>(2 * n));
  lse.resize(be, static_cast<size_t>(n));
  be.vocab_row_max(logits, ld, real, max.data(), n);
  MS_RETURN_IF_ERROR(tp.allreduce(max.data(), max.data(), max.size(), DType::kF32,
                                  comm::ReduceOp::kMax));
  be.vocab_local_sums(logits, ld, real, shard.begin, targets, max.data(), pairs.data(), n);
  MS_RETURN_IF_ERROR(tp.allreduce(pairs.data(), pairs.data(), pairs.size(), DType::kF32,
                                  comm::ReduceOp::kSum));
  be.vocab_losses(max.data(), pairs.data(), lse.data(), losses, n);
  if (write_grad) {
    be.vocab_local_grad(logits, ld, real, shard.begin, targets, lse.data(), grad_scale, n);
  }
  return Status::OK();
}

Status vocab_parallel_log_probs(comm::Communicator* tp, const VocabShard& shard,
                                const float* logits, int64_t ld, const int32_t* targets,
                                std::span<const int64_t> rows, double* log_probs,
                                double* entropy) {
  if (tp != nullptr) assert_matches(shard, *tp);
  const int64_t real = shard.real_end() - shard.begin;
  if (ld < real || ld > shard.length) {
    return InvalidArgument("log-prob logits row stride " + std::to_string(ld) +
                           " must lie between the real columns held (" + std::to_string(real) +
                           ") and the padded shard (" + std::to_string(shard.length) + ")");
  }
  const size_t n = rows.size();
  std::vector<float> max(n, -std::numeric_limits<float>::infinity());
  for (size_t i = 0; i < n; ++i) {
    const float* z = logits + rows[i] * ld;
    for (int64_t v = 0; v < real; ++v) max[i] = std::max(max[i], z[v]);
  }
  if (tp != nullptr && tp->size() > 1) {
    MS_RETURN_IF_ERROR(tp->allreduce(max.data(), max.data(), n, DType::kF32, comm::ReduceOp::kMax));
  }
  // Per row: sum of e = exp(z - max), sum of e (z - max), the target's z - max.
  std::vector<double> sums(3 * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const float* z = logits + rows[i] * ld;
    const double m = max[i];
    for (int64_t v = 0; v < real; ++v) {
      const double shifted = static_cast<double>(z[v]) - m;
      const double e = std::exp(shifted);
      sums[3 * i] += e;
      sums[3 * i + 1] += e * shifted;
    }
    const int64_t target = targets[rows[i]];
    if (target >= shard.begin && target < shard.real_end()) {
      sums[3 * i + 2] = static_cast<double>(z[target - shard.begin]) - m;
    }
  }
  if (tp != nullptr && tp->size() > 1) {
    std::vector<double> all(sums.size() * static_cast<size_t>(tp->size()));
    MS_RETURN_IF_ERROR(tp->allgather(sums.data(), all.data(), sums.size() * sizeof(double),
                                     DType::kU8));
    std::fill(sums.begin(), sums.end(), 0.0);
    for (int r = 0; r < tp->size(); ++r) {
      const double* part = all.data() + static_cast<size_t>(r) * sums.size();
      for (size_t k = 0; k < sums.size(); ++k) sums[k] += part[k];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const double log_sum = std::log(sums[3 * i]);
    log_probs[i] = sums[3 * i + 2] - log_sum;
    entropy[i] = log_sum - sums[3 * i + 1] / sums[3 * i];
  }
  return Status::OK();
}

}  // namespace ms::parallel
