// Vocabulary-parallel embedding and fused softmax cross-entropy over a tensor-parallel group.
// The vocabulary is padded to a multiple of tp (tp_layout.h); tp rank r holds rows
// [r Vp/tp, (r+1) Vp/tp) of the padded (Vp, d) embedding table and the same columns of the
// logits (the output layer is a column-parallel linear with out_features = Vp). Padded ids
// never occur as inputs or targets, and padded logit columns are never read: they neither
// raise the max nor add to the sum of exponentials, and their gradient is zero. So whatever
// finite values the padded rows of a weight hold, the loss and every real gradient are those of
// the unpadded model, and those rows get a zero gradient. Keep them at zero: a NaN there would
// reach the output layer's input gradient (0 * NaN is NaN).
//
// The cross-entropy never gathers the (n, Vp) logits: each rank reduces its own columns to a
// row max, a sum of exponentials and (where it holds the target) the target logit, and only
// those (n)-sized vectors cross tp: one all-reduce MAX, then one all-reduce SUM of the
// (sum of exponentials, target logit) pairs. Its backward is local.
//
// Collective over `tp`: every rank calls with the same shapes; shapes are
// checked before communicating. Buffers are on `be`'s device, whose ops do the local work (the
// host's by default). `shard` must be vocab_shard(vocab, tp.size(), tp.rank())
// (asserted). The caller validates ids and targets to lie in [0, vocab).
#pragma once

#include <cstdint>
#include <span>

#include "comm/communicator.h"
#include "core/status.h"
#include "ops/backend.h"
#include "parallel/tp_layout.h"

namespace ms::parallel {

struct VocabEmbeddingShape {
  int64_t rows = 0;  // n: tokens of the whole sequence block, before any SP split
  int64_t dim = 0;   // d: embedding width
  bool sequence_parallel = false;
};

// InvalidArgument when rows < 0, dim < 1, or with SP when tp does not divide rows.
Status check_vocab_embedding(const VocabEmbeddingShape& shape, int tp);

// ids: (n), all of them on every rank; table: (Vp/tp, d) this rank's rows. out: (n, d), or the
// rank's (n/tp, d) sequence block with SP (overwritten): table rows of the ids held here, zero
// for the others, summed over tp (all-reduce, or reduce-scatter with SP).
Status vocab_parallel_embedding_forward(comm::Communicator& tp, const VocabShard& shard,
                                        const VocabEmbeddingShape& shape, const int32_t* ids,
                                        const float* table, float* out,
                                        ops::Backend& be = ops::cpu_backend());

// dout: (n, d), or (n/tp, d) with SP (all-gathered first). dtable: (Vp/tp, d) accumulates
// dout[i] into row ids[i] - begin for every id held here; other rows are untouched.
Status vocab_parallel_embedding_backward(comm::Communicator& tp, const VocabShard& shard,
                                         const VocabEmbeddingShape& shape, const int32_t* ids,
                                         const float* dout, float* dtable,
                                         ops::Backend& be = ops::cpu_backend());

// logits: (n, Vp/tp) this rank's columns; targets: (n) -> losses: (n), the same on every rank,
// losses[i] = logsumexp over the real vocabulary of row i - the logit of targets[i].
// When write_grad, the local logits are overwritten with grad_scale * (softmax - onehot) of
// their columns (zero in padded columns), the gradient of grad_scale * losses[i]; as in
// ops::softmax_cross_entropy the caller folds the 1/n of a mean into grad_scale.
// InvalidArgument when n < 0.
Status vocab_parallel_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                    float* logits, const int32_t* targets, float* losses,
                                    int64_t n, float grad_scale, bool write_grad,
                                    ops::Backend& be = ops::cpu_backend());
// The same with the local logits' rows `ld` apart, real_end() - begin <= ld <= length: ld =
// real_end() - begin holds no padded columns at all, as lib/model stores them (its output
// layer holds the real rows only, parallel/tp_shards.h). Columns [real, ld) are padding.
Status vocab_parallel_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                    float* logits, int64_t ld, const int32_t* targets,
                                    float* losses, int64_t n, float grad_scale,
                                    bool write_grad, ops::Backend& be = ops::cpu_backend());

// RL post-training's per-token policy figures (lib/rl): for each row i of `rows`, the
// log-probability of targets[i] and the entropy of the softmax over the real vocabulary, in
// double, from this rank's columns of the (n, ld) logits in host memory (ld as above). `tp`
// null: the whole vocabulary is here (shard is vocab_shard(vocab, 1, 0)). Collective over tp:
// one all-reduce MAX of a float per row, then one all-gather of three doubles per row (the
// sums of exp(z - max) and of exp(z - max) (z - max), and the target's z - max where held),
// added in rank order so every rank gets the same bits. The caller validates the targets and
// that each row lies in [0, n).
Status vocab_parallel_log_probs(comm::Communicator* tp, const VocabShard& shard,
                                const float* logits, int64_t ld, const int32_t* targets,
                                std::span<const int64_t> rows, double* log_probs,
                                double* entropy);

}  // namespace ms::parallel
