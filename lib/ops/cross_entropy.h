// Fused softmax cross-entropy over a vocabulary: one pass computes each row's loss and, in
// training, overwrites the logits with their gradient, so no separate (n, vocab) probability
// buffer is ever allocated.
#pragma once

#include <cstdint>

namespace ms::ops {

// logits: (n, vocab), targets: (n) in [0, vocab) (the caller validates) -> losses: (n) with
// losses[i] = logsumexp(logits[i]) - logits[i][targets[i]].
// When write_grad, logits[i] is then overwritten with grad_scale * (softmax(logits[i]) -
// onehot(targets[i])), the gradient of grad_scale * losses[i]; the caller folds the 1/n of a
// mean loss into grad_scale.
void softmax_cross_entropy(float* logits, const int32_t* targets, float* losses, int64_t n,
                           int64_t vocab, float grad_scale, bool write_grad);

// ---- The vocabulary-parallel form's local pieces (parallel/vocab_parallel.h puts them around
// its two all-reduces over tp). A rank holds the logit columns of ids [first, first + real) of
// each row, the row's first `real` of `ld` columns (ld - real padding columns follow);
// targets lie in [0, vocab) (the caller validates), and the rank holds target t when
// first <= t < first + real. ----

// max[i] = the largest of row i's real columns; -inf when real is 0.
void vocab_row_max(const float* logits, int64_t ld, int64_t real, float* max, int64_t n);
// pairs[2i] = sum over the real columns of exp(logit - max[i]) (taken in double);
// pairs[2i+1] = the target's logit when held here, else 0, so a sum over tp gives it.
void vocab_local_sums(const float* logits, int64_t ld, int64_t real, int64_t first,
                      const int32_t* targets, const float* max, float* pairs, int64_t n);
// From the max and the pairs summed over tp: lse[i] = max[i] + log(pairs[2i]) and
// losses[i] = lse[i] - pairs[2i+1] (in double, rounded once).
void vocab_losses(const float* max, const float* pairs, float* lse, float* losses, int64_t n);
// Row i's local columns overwritten with grad_scale * (softmax - onehot); padding gets zero.
void vocab_local_grad(float* logits, int64_t ld, int64_t real, int64_t first,
                      const int32_t* targets, const float* lse, float grad_scale, int64_t n);

}  // namespace ms::ops
