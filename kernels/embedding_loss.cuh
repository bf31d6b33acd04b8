// Embedding and loss kernels on the GPU, twins of lib/ops/embedding.h and
// lib/ops/cross_entropy.h: the same names and argument order on device pointers (token ids and
// targets included), plus the stream to enqueue on. Plain C++ declarations, so CPU-only code can
// include this header.
//
// Each entry point checks its arguments first (null with work to do, misalignment, negative or
// inconsistent shapes) and returns InvalidArgument naming the op and the argument before any
// CUDA call; empty work launches nothing. Entry points only enqueue work.
//
// Ids and targets are device data and cannot be validated before the launch; the CPU twins
// require them in range (their callers validate) and read out of bounds otherwise. Here:
// embedding_forward gives a negative id a row of zeros but reads row ids[i] >= vocab past the
// table like its twin (it is not told the vocabulary size); a target outside [0, vocab) in
// softmax_cross_entropy makes that row's loss and, with write_grad, its gradient row NaN, so
// bad data cannot pass unnoticed.
//
// Determinism: no atomics; each output element is written by one thread, row sums are fixed
// trees in double as on the CPU, so two runs give the same bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// ---- Embedding (ops/embedding.h) ----

// ids: (n), table: (vocab, d) -> out: (n, d) = table[ids]. Exact (a copy).
Status embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                         int64_t d, Stream stream = nullptr);
// The vocabulary-parallel form: table holds rows of ids [first, first + count); out[i] is that
// row for a held id and zeros otherwise.
Status embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                               int64_t d, int64_t first, int64_t count,
                               Stream stream = nullptr);

// The backward of both forms, from a kernels::group_tokens_by_row grouping uploaded to the
// device (kernels/embedding_grouping.h): rows (groups), starts (groups + 1) and tokens
// (starts[groups]) are device arrays. For each group g, dtable row rows[g] accumulates
// dout[tokens[k]] for k in [starts[g], starts[g + 1]) in that order: one block per group, one
// thread per column, so each element of dtable is summed by one thread in increasing token
// order, the order of ops::embedding_backward(_range): the result is bitwise the CPU twin's.
// dout: (n, d); dtable: the (count or vocab, d) table the rows index.
Status embedding_backward_grouped(const int32_t* rows, const int64_t* starts,
                                  const int64_t* tokens, int64_t groups, const float* dout,
                                  float* dtable, int64_t d, Stream stream = nullptr);

// ---- Softmax cross-entropy (ops/cross_entropy.h) ----

// logits: (n, vocab), targets: (n) -> losses: (n), losses[i] = logsumexp(row) - row[target];
// with write_grad the row is overwritten with grad_scale * (softmax(row) - onehot(target)).
// One block per row, three passes over the row (max, sum of exp in double, loss and gradient),
// no probability buffer.
Status softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                             int64_t vocab, float grad_scale, bool write_grad,
                             Stream stream = nullptr);

// The vocabulary-parallel form's local pieces, exact twins of ops::vocab_* (rows of `ld`
// columns of which the first `real` are this rank's vocabulary ids [first, first + real)).
// max[i] = the largest real column of row i (-inf when real is 0); exact.
Status vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max, int64_t n,
                     Stream stream = nullptr);
// pairs[2i] = sum over the real columns of exp(logit - max[i]) in double; pairs[2i+1] = the
// target's logit when held here, else 0 (a target outside [0, vocab) is simply not held).
Status vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* max, float* pairs, int64_t n,
                        Stream stream = nullptr);
// lse[i] = max[i] + log(pairs[2i]), losses[i] = lse[i] - pairs[2i+1], in double.
Status vocab_losses(const float* max, const float* pairs, float* lse, float* losses, int64_t n,
                    Stream stream = nullptr);
// Row i's real columns overwritten with grad_scale * (exp(logit - lse[i]) - onehot); the
// padding columns [real, ld) get zero.
Status vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                        const int32_t* targets, const float* lse, float grad_scale, int64_t n,
                        Stream stream = nullptr);

}  // namespace ms::kernels
