// Mixture-of-Experts routing on the CPU: top-k selection with renormalized weights, dropless
// permutation of tokens into per-expert groups (so each expert runs one matmul over all its
// tokens, see grouped_linear_* in ops/linear.h), the weighted un-permutation, and the
// load-balancing auxiliary loss. The router's softmax is ops::softmax_forward.
//
// Load-balancing loss (Switch Transformer, Fedus et al. 2021, generalized to top-k):
//   aux = E * sum_e f_e * P_e,  f_e = (assignments to expert e) / (n * k),  P_e = mean_i p_ie
// so a perfectly uniform router scores 1. f_e is piecewise constant, so only P carries a
// gradient: d aux / d p_ie = E * f_e / n.
#pragma once

#include <cstdint>
#include <vector>

namespace ms::ops {

// The routing of n tokens to k of e experts, grouped by expert. Within an expert, tokens keep
// their order, so the permutation (and every sum over it) is deterministic.
//
// With a capacity (moe_apply_capacity) an expert keeps at most that many of its assignments,
// the earliest tokens first; a dropped (token, slot) has row_of -1 and contributes nothing
// (the other slots' weights are not renormalized). The permuted rows are then the kept ones.
struct MoeRouting {
  int64_t tokens = 0, experts = 0, top_k = 0;
  std::vector<int32_t> expert;        // (n, k) chosen experts, highest probability first
  std::vector<int64_t> offsets;       // (e + 1) first permuted row of each expert
  std::vector<int64_t> row_of;        // (n, k) permuted row of each (token, slot); -1: dropped
  std::vector<int64_t> token_of_row;  // (kept rows) token of each permuted row
  std::vector<int64_t> routed;        // (e) assignments chosen per expert, before any drop
  int64_t dropped = 0;                // assignments dropped by a capacity
  int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// probs: (n, e) router probabilities -> weights: (n, k) the chosen probabilities divided by
// their sum, and the routing. Ties pick the lower expert index. Requires 1 <= k <= e.
// bias: (e) or null, auxiliary-loss-free balancing (DeepSeek-V3): the experts are chosen by
// probs + bias, but the weights stay the chosen probabilities renormalized, so the bias steers
// the load without entering the output or the gradient.
MoeRouting moe_route(const float* probs, float* weights, int64_t n, int64_t e, int64_t k,
                     const float* bias = nullptr);

// Auxiliary-loss-free balancing's update after a step, Megatron-LM's get_updated_expert_bias
// rule: counts: (e) the assignments the router chose per expert over the whole step (every
// micro-batch, every data-parallel rank); bias[j] += rate * sign(mean(counts) - counts[j]), so
// an overloaded expert's bias falls, an underloaded one's rises, and one at the mean stays.
void moe_update_expert_bias(const int64_t* counts, float* bias, int64_t e, double rate);

// Keeps at most `capacity` assignments per expert (the earliest tokens' first) and rebuilds the
// permutation over the kept ones. capacity <= 0 keeps all (dropless).
void moe_apply_capacity(MoeRouting& r, int64_t capacity);

// The capacity of a capacity factor: ceil(factor * n * k / e) assignments per expert, from
// the tokens routed together (this rank's micro-batch), so it does not depend on where the
// experts run. factor <= 0: 0 (dropless).
int64_t moe_capacity(double factor, int64_t n, int64_t e, int64_t k);

// dweights: (n, k). Accumulates into dprobs: (n, e) the gradient through the renormalization
// (the selection itself is piecewise constant): dp_j = (dw_j - sum_l dw_l w_l) / S for chosen j,
// where S is the sum of the chosen probabilities.
void moe_route_backward(const float* probs, const float* weights, const MoeRouting& r,
                        const float* dweights, float* dprobs);

// x: (n, d) -> xp: (rows, d) with xp[row_of[i, s]] = x[i] for every kept (token, slot).
void moe_permute_forward(const float* x, const MoeRouting& r, float* xp, int64_t d);
// dxp: (n * k, d). Accumulates dx[i] += sum_s dxp[row_of[i, s]] (slots in order).
void moe_permute_backward(const float* dxp, const MoeRouting& r, float* dx, int64_t d);

// yp: (n * k, d), weights: (n, k) -> y: (n, d) = sum_s weights[i, s] * yp[row_of[i, s]].
void moe_unpermute_forward(const float* yp, const float* weights, const MoeRouting& r, float* y,
                           int64_t d);
// dy: (n, d). Accumulates dyp[row_of[i, s]] += weights[i, s] * dy[i] and
// dweights[i, s] += dy[i] . yp[row_of[i, s]].
void moe_unpermute_backward(const float* yp, const float* weights, const MoeRouting& r,
                            const float* dy, float* dyp, float* dweights, int64_t d);

// probs: (n, e). The load-balancing loss above, summed in double; f_e counts the assignments
// the router chose (`routed`), whether or not a capacity dropped them.
double moe_aux_loss(const float* probs, const MoeRouting& r);
// Accumulates daux * d aux / d probs into dprobs: (n, e).
void moe_aux_loss_backward(const MoeRouting& r, float daux, float* dprobs);
// probs: (n, e) -> sums[j] = the sum over the tokens of probs[., j] in f64, the probability
// mass each expert received (the load-balancing loss's second factor, summed over a cp group).
void moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums);

// The router z-loss (ST-MoE): per token lse_i = logsumexp of its router logits (n, e), written
// to lse, and the returned sum over the tokens of lse_i^2 in f64 (the loss is its mean).
double moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e);
// Accumulates scale * lse_i * probs_ij into dlogits (n, e): with scale = 2 dz / n, the gradient
// of dz * mean_i lse_i^2 with respect to the logits (d lse_i / d l_ij = probs_ij).
void moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                         int64_t n, int64_t e);

}  // namespace ms::ops
