// The element loops of the optimizers (train/optimizer.h keeps the state, the segments and the
// per-step scalars): AdamW as PyTorch's single-tensor torch.optim.AdamW computes it (decoupled
// weight decay applied before the moment step, bias-corrected moments), and LAMB's two passes
// (You et al. 2019: the Adam direction plus weight decay, then a step scaled per parameter by
// the trust ratio the caller derives from the norms of the first pass).
//
// Per-element arithmetic is fp32 in the fixed order written in optimizer.cc, with no fused
// multiply-add: the values after a step are part of what a bitwise resume and the golden
// tests pin, so a device twin must produce the same bits. The norms of LAMB's first pass are
// accumulated in double, left to right, so that a parameter split between ZeRO shards sums to
// the same value up to rounding of the final sum.
#pragma once

#include <cstdint>

namespace ms::ops {

// The per-step scalars, computed once per step (in double, then rounded) by the caller.
struct AdamCoefficients {
  float lr = 0;
  float grad_scale = 1;  // every gradient is multiplied by this first
  float beta1 = 0, one_minus_beta1 = 1;
  float beta2 = 0, one_minus_beta2 = 1;
  float inv_bias1 = 1;       // 1 / (1 - beta1^t)
  float inv_sqrt_bias2 = 1;  // 1 / sqrt(1 - beta2^t)
  float eps = 0;
  float weight_decay = 0;
};

// One AdamW step of n elements: w (values), m, v (first and second moments) updated in place
// from g. Weight decay applies only when `weight_decay` (norms and biases go without).
void adamw_update(const AdamCoefficients& c, bool weight_decay, float* w, const float* g,
                  float* m, float* v, int64_t n);

// LAMB's first pass over n elements: updates m and v from g and writes the direction
// d = adam + decay * w (decay = c.weight_decay when `weight_decay`, else 0). norms: (2),
// overwritten with sum w^2 and sum d^2 over these n elements.
void lamb_direction(const AdamCoefficients& c, bool weight_decay, const float* w,
                    const float* g, float* m, float* v, float* d, double* norms, int64_t n);

// LAMB's second pass: w[i] -= step * d[i] for i < n (step = lr times the trust ratio).
void lamb_update(float step, const float* d, float* w, int64_t n);

}  // namespace ms::ops
