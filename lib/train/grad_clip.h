// Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_ defines it: the norm is
// taken over every gradient element of the model, and when it exceeds the limit every gradient
// is scaled by limit / (norm + 1e-6). The trainer folds the coefficient into the optimizer's
// gradient scale rather than rewriting the gradients. The squared norm is the backend's
// sum_of_squares_f64 (ops/reduce.h: in double, in index order), summed over the gradient's
// shards and ranks by the distributed optimizer.
#pragma once

namespace ms::train {

// min(1, max_norm / (grad_norm + 1e-6)); 1 when max_norm is 0 (clipping off).
double clip_coefficient(double grad_norm, double max_norm);

}  // namespace ms::train
