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

}  // namespace ms::ops
