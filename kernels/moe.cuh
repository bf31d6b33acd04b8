// Mixture-of-Experts kernels on the GPU, twins of lib/ops/moe.h: the backward of the router's
// renormalization, the permutation of tokens into per-expert rows and back, the load-balancing
// loss and the router z-loss. Same names and argument order as ops::Backend's MoE ops, on device
// pointers, plus the stream to enqueue on; plain C++ declarations, so CPU-only code includes this.
//
// Routing itself (ops::moe_route, ops::moe_apply_capacity) stays on the host: its counts size
// the buffers. The caller uploads the resulting ops::MoeRouting and passes a MoeRoutingView of
// the device copies where the CPU twin takes the MoeRouting. A value the CPU twin returns (a
// double) is written to a device scalar instead.
//
// Determinism: every output element is produced by one thread (or one warp's fixed shuffle
// tree); sums over tokens go through per-block partials and one ordered pass; no atomics. The
// gather, scatter and weighted-sum ops repeat the CPU's fp32 operations in its order (slots in
// order, each product and sum rounded on its own) and give its bits. Dot products over d
// (dweights) sum in fp32 in a warp tree instead of left to right; sums over tokens accumulate
// in double like the CPU, in a different order. docs/kernels.md lists the tolerances.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/device.h"

namespace ms::kernels {

// Device copies of an ops::MoeRouting's arrays, laid out exactly as its std::vectors, with its
// sizes as host values. n = tokens, k = top_k, e = experts.
struct MoeRoutingView {
  int64_t tokens = 0;   // n, tokens routed
  int64_t experts = 0;  // e, at least 1
  int64_t top_k = 0;    // k, 1 <= k <= e
  int64_t rows = 0;     // kept permuted rows, MoeRouting::rows() (= offsets[e]), <= n * k
  const int32_t* expert = nullptr;        // (n, k) chosen expert of each (token, slot)
  const int64_t* offsets = nullptr;       // (e + 1) first permuted row of each expert
  const int64_t* row_of = nullptr;        // (n, k) permuted row of each (token, slot); -1: dropped
  const int64_t* token_of_row = nullptr;  // (rows) token of each permuted row
  const int64_t* routed = nullptr;        // (e) assignments chosen per expert, before any drop
};
// The kernels trust the arrays' contents (indices in range, as the host routing built them);
// each entry point checks the sizes and that every array is present and aligned.

// Accumulates into dprobs: (n, e) the gradient through the renormalized weights.
// probs: (n, e), weights, dweights: (n, k). Bitwise the CPU's.
Status moe_route_backward(const float* probs, const float* weights, const MoeRoutingView& r,
                          const float* dweights, float* dprobs, Stream stream = nullptr);

// xp: (rows, d) overwritten, xp[row_of[i, s]] = x[i]. x: (n, d).
Status moe_permute_forward(const float* x, const MoeRoutingView& r, float* xp, int64_t d,
                           Stream stream = nullptr);
// Accumulates dx[i] += dxp[row_of[i, s]] over the kept slots in slot order. dxp: (rows, d);
// dx: (n, d). Bitwise the CPU's.
Status moe_permute_backward(const float* dxp, const MoeRoutingView& r, float* dx, int64_t d,
                            Stream stream = nullptr);

// y: (n, d) overwritten with sum_s weights[i, s] * yp[row_of[i, s]] (kept slots, slot order).
// yp: (rows, d); weights: (n, k). Bitwise the CPU's.
Status moe_unpermute_forward(const float* yp, const float* weights, const MoeRoutingView& r,
                             float* y, int64_t d, Stream stream = nullptr);
// Accumulates dyp[row_of[i, s]] += weights[i, s] * dy[i] (bitwise the CPU's) and
// dweights[i, s] += dy[i] . yp[row_of[i, s]] (fp32, a warp tree over d). yp, dyp: (rows, d);
// weights, dweights: (n, k); dy: (n, d).
Status moe_unpermute_backward(const float* yp, const float* weights, const MoeRoutingView& r,
                              const float* dy, float* dyp, float* dweights, int64_t d,
                              Stream stream = nullptr);

// *out = the load-balancing loss of probs: (n, e) under the routing (ops::moe_aux_loss), with
// the probability sums in double. out: device scalar.
Status moe_aux_loss(const float* probs, const MoeRoutingView& r, double* out,
                    Stream stream = nullptr);
// Accumulates daux * d aux / d probs into dprobs: (n, e). Bitwise the CPU's.
Status moe_aux_loss_backward(const MoeRoutingView& r, float daux, float* dprobs,
                             Stream stream = nullptr);
// sums: device (e) doubles, overwritten with the sum over the n tokens of probs[., j] (0 for
// n = 0). probs: (n, e).
Status moe_probability_sums(const float* probs, int64_t n, int64_t e, double* sums,
                            Stream stream = nullptr);

// lse: (n) overwritten with each token's logsumexp of logits: (n, e) (e >= 1 when n > 0), and
// *out (device scalar) with the sum over the tokens of lse_i^2 in double (0 for n = 0).
Status moe_z_loss(const float* logits, float* lse, int64_t n, int64_t e, double* out,
                  Stream stream = nullptr);
// Accumulates scale * lse[i] * probs[i, j] into dlogits: (n, e). Bitwise the CPU's.
Status moe_z_loss_backward(const float* probs, const float* lse, float scale, float* dlogits,
                           int64_t n, int64_t e, Stream stream = nullptr);

}  // namespace ms::kernels
