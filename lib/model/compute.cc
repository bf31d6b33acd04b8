// The Transformer's forward and backward over a whole micro-batch: every projection is one
// sgemm over all N = B*T tokens (one per expert for MoE), attention is the tiled kernel of
// ops/attention.h, and the residual-stream gradient is updated in place layer by layer.
//
// With tensor parallelism the same code runs on this rank's heads and d_ff slice (TpState),
// and the tp collectives sit at the edges of each column-parallel group and row-parallel
// projection (model/tp_comm.cc): per block, the normed input is gathered (SP) and the
// projection's partial sums reduced; the parallel block's attention and FFN share one gather
// and one reduction. Without tp those steps are the identity and cost nothing.
#include <algorithm>

#include "model/model_impl.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"

namespace ms::model {
namespace {

// Resizes v to n elements and returns its data (contents unspecified).
float* sized(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
  return v.data();
}

// Resizes v to n elements, all zero.
float* zeroed(std::vector<float>& v, int64_t n) {
  v.assign(static_cast<size_t>(n), 0.0f);
  return v.data();
}

void add_into(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

ops::AttentionShape Transformer::Impl::attention_shape(const Dims& d) const {
  ops::AttentionShape s;
  s.batch = d.B;
  s.seq = d.T;
  s.heads = tp.heads;
  s.kv_heads = tp.kv_heads;
  s.head_dim = head_dim();
  s.window = cfg.sliding_window;
  return s;
}

// normed: (N, D) -> q, k, v after RoPE, the attention output and its log-sum-exp, on this
// rank's heads.
void Transformer::Impl::attention_internals(AttnActs& a, const LayerIndex& li,
                                            const float* normed, const Dims& d) {
  const int64_t D = cfg.d_model, qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
  float* q = sized(a.q, d.N * qd);
  float* k = sized(a.k, d.N * kvd);
  float* v = sized(a.v, d.N * kvd);
  ops::linear_forward(normed, w(li.q), q, d.N, D, qd);
  ops::linear_forward(normed, w(li.k), k, d.N, D, kvd);
  ops::linear_forward(normed, w(li.v), v, d.N, D, kvd);
  ops::rope_forward(q, rope, d.B, d.T, tp.heads);
  ops::rope_forward(k, rope, d.B, d.T, tp.kv_heads);
  ops::attention_forward(attention_shape(d), q, k, v, sized(a.attn, d.N * qd),
                         sized(a.lse, d.B * tp.heads * d.T));
}

// normed: (N, D) -> out: (N, D) = o_proj(attention(rope(q_proj), rope(k_proj), v_proj)), this
// rank's partial sum under tp.
void Transformer::Impl::attention_forward(AttnActs& a, const LayerIndex& li, const float* normed,
                                          float* out, const Dims& d) {
  attention_internals(a, li, normed, d);
  ops::linear_forward(a.attn.data(), w(li.o), out, d.N, tp.heads * head_dim(), cfg.d_model);
}

// dout: (N, D) gradient of the attention output; accumulates dnormed: (N, D) (this rank's
// partial under tp).
void Transformer::Impl::attention_backward(AttnActs& a, const LayerIndex& li,
                                           const float* normed, const float* dout,
                                           float* dnormed, const Dims& d) {
  const int64_t D = cfg.d_model, qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
  Scratch& s = scratch;
  float* dattn = zeroed(s.dattn, d.N * qd);
  ops::linear_backward(a.attn.data(), w(li.o), dout, dattn, g(li.o), d.N, qd, D);
  float* dq = zeroed(s.dq, d.N * qd);
  float* dk = zeroed(s.dk, d.N * kvd);
  float* dv = zeroed(s.dv, d.N * kvd);
  ops::attention_backward(attention_shape(d), a.q.data(), a.k.data(), a.v.data(), a.attn.data(),
                          a.lse.data(), dattn, dq, dk, dv);
  ops::rope_backward(dq, rope, d.B, d.T, tp.heads);
  ops::rope_backward(dk, rope, d.B, d.T, tp.kv_heads);
  ops::linear_backward(normed, w(li.q), dq, dnormed, g(li.q), d.N, D, qd);
  ops::linear_backward(normed, w(li.k), dk, dnormed, g(li.k), d.N, D, kvd);
  ops::linear_backward(normed, w(li.v), dv, dnormed, g(li.v), d.N, D, kvd);
}

// x: (rows, D) -> out: (rows, D) = down(silu(gate(x)) * up(x)), added to out when accumulate.
void Transformer::Impl::mlp_forward(const MlpIndex& m, int64_t d_ff, MlpActs& acts,
                                    const float* x, float* out, int64_t rows, bool accumulate) {
  const int64_t D = cfg.d_model;
  float* gate = sized(acts.gate, rows * d_ff);
  float* up = sized(acts.up, rows * d_ff);
  ops::linear_forward(x, w(m.gate), gate, rows, D, d_ff);
  ops::linear_forward(x, w(m.up), up, rows, D, d_ff);
  float* act = sized(scratch.act, rows * d_ff);
  ops::swiglu_forward(gate, up, act, rows * d_ff);
  if (!accumulate) {
    ops::linear_forward(act, w(m.down), out, rows, d_ff, D);
    return;
  }
  float* proj = sized(scratch.proj, rows * D);
  ops::linear_forward(act, w(m.down), proj, rows, d_ff, D);
  add_into(out, proj, rows * D);
}

// Accumulates dx: (rows, D) and the three weight gradients from dout: (rows, D).
void Transformer::Impl::mlp_backward(const MlpIndex& m, int64_t d_ff, const MlpActs& acts,
                                     const float* x, const float* dout, float* dx, int64_t rows) {
  const int64_t D = cfg.d_model;
  Scratch& s = scratch;
  float* act = sized(s.act, rows * d_ff);
  ops::swiglu_forward(acts.gate.data(), acts.up.data(), act, rows * d_ff);
  float* dact = zeroed(s.dact, rows * d_ff);
  ops::linear_backward(act, w(m.down), dout, dact, g(m.down), rows, d_ff, D);
  float* dgate = zeroed(s.dgate, rows * d_ff);
  float* dup = zeroed(s.dup, rows * d_ff);
  ops::swiglu_backward(acts.gate.data(), acts.up.data(), dact, dgate, dup, rows * d_ff);
  ops::linear_backward(x, w(m.gate), dgate, dx, g(m.gate), rows, D, d_ff);
  ops::linear_backward(x, w(m.up), dup, dx, g(m.up), rows, D, d_ff);
}

}  // namespace ms::model

namespace ms::model {
namespace {

struct ExpertWeights {
  std::vector<const float*> gate, up, down;
  std::vector<float*> dgate, dup, ddown;
};

ExpertWeights expert_weights(Transformer::Impl& m, const LayerIndex& li) {
  ExpertWeights e;
  for (const MlpIndex& x : li.experts) {
    e.gate.push_back(m.w(x.gate));
    e.up.push_back(m.w(x.up));
    e.down.push_back(m.w(x.down));
    e.dgate.push_back(m.g(x.gate));
    e.dup.push_back(m.g(x.up));
    e.ddown.push_back(m.g(x.down));
  }
  return e;
}

}  // namespace

// x: (n, D) -> the routing in m (router probabilities, renormalized top-k weights, grouping) and
// xp: (n * k, D) the rows of x each expert receives, grouped by expert.
void Transformer::Impl::moe_dispatch(MoeActs& m, const LayerIndex& li, const float* x,
                                     std::vector<float>& xp, int64_t n) {
  const int64_t D = cfg.d_model, E = cfg.moe.num_experts, k = cfg.moe.top_k;
  float* logits = sized(scratch.router_logits, n * E);
  ops::linear_forward(x, w(li.router), logits, n, D, E);
  ops::softmax_forward(logits, sized(m.probs, n * E), n, E);
  m.routing = ops::moe_route(m.probs.data(), sized(m.weights, n * k), n, E, k);
  ops::moe_permute_forward(x, m.routing, sized(xp, n * k * D), D);
}

// xp: (rows, D) grouped by expert (expert e's rows are [offsets[e], offsets[e + 1]), rows =
// offsets[E]) -> yp: (rows, D), one SwiGLU matmul chain per expert. Experts with no rows are
// skipped, so a rank holding only some experts' weights may call this with zero rows for the
// others. acts keeps the gate/up projections for the backward.
void Transformer::Impl::experts_forward(const LayerIndex& li, MlpActs& acts, const float* xp,
                                        const int64_t* offsets, float* yp) {
  const int64_t D = cfg.d_model, E = cfg.moe.num_experts, F = tp.d_ff, rows = offsets[E];
  const ExpertWeights ew = expert_weights(*this, li);
  float* gate = sized(acts.gate, rows * F);
  float* up = sized(acts.up, rows * F);
  ops::grouped_linear_forward(xp, ew.gate.data(), offsets, E, gate, D, F);
  ops::grouped_linear_forward(xp, ew.up.data(), offsets, E, up, D, F);
  float* act = sized(scratch.act, rows * F);
  ops::swiglu_forward(gate, up, act, rows * F);
  ops::grouped_linear_forward(act, ew.down.data(), offsets, E, yp, F, D);
}

// yp: (n * k, D) expert outputs in dispatch order -> out: (n, D) = the routing-weighted sum of
// each token's experts, plus the shared expert over x: (n, D) when configured.
void Transformer::Impl::moe_combine(const MoeActs& m, const LayerIndex& li, const float* x,
                                    const float* yp, float* out, MlpActs& shared, int64_t n) {
  ops::moe_unpermute_forward(yp, m.weights.data(), m.routing, out, cfg.d_model);
  if (cfg.moe.shared_expert_d_ff > 0) mlp_forward(li.shared, tp.shared_d_ff, shared, x, out, n, true);
}

// x: (n, D) -> out: (n, D): route, run every expert over its tokens, combine with the routing
// weights, add the shared expert. Returns this layer's load-balancing loss.
double Transformer::Impl::moe_forward(MoeActs& m, const LayerIndex& li, const float* x,
                                      float* out, int64_t n) {
  const int64_t D = cfg.d_model, k = cfg.moe.top_k;
  moe_dispatch(m, li, x, scratch.permuted, n);
  float* yp = sized(m.expert_out, n * k * D);
  experts_forward(li, m.experts, scratch.permuted.data(), m.routing.offsets.data(), yp);
  moe_combine(m, li, x, yp, out, m.shared, n);
  return ops::moe_aux_loss(m.probs.data(), m.routing);
}

// Accumulates dx: (n, D) and every expert, router and shared-expert gradient from dout: (n, D);
// aux_grad is d(objective)/d(this layer's aux loss).
void Transformer::Impl::moe_backward(MoeActs& m, const LayerIndex& li, const float* x,
                                     const float* dout, float* dx, float aux_grad, int64_t n) {
  const int64_t D = cfg.d_model, E = cfg.moe.num_experts, k = cfg.moe.top_k, F = tp.d_ff;
  Scratch& s = scratch;
  if (cfg.moe.shared_expert_d_ff > 0) mlp_backward(li.shared, tp.shared_d_ff, m.shared, x, dout, dx, n);
  const int64_t* offsets = m.routing.offsets.data();
  const ExpertWeights ew = expert_weights(*this, li);
  float* dyp = zeroed(s.dexpert_out, n * k * D);
  float* dweights = zeroed(s.dweights, n * k);
  ops::moe_unpermute_backward(m.expert_out.data(), m.weights.data(), m.routing, dout, dyp,
                              dweights, D);
  // Under tp each rank's expert outputs are partial sums over its d_ff slice, and so are the
  // routing weights' gradients: summed here, the router's backward is the same on every rank.
  allreduce_tp(dweights, n * k);
  float* act = sized(s.act, n * k * F);
  ops::swiglu_forward(m.experts.gate.data(), m.experts.up.data(), act, n * k * F);
  float* dact = zeroed(s.dact, n * k * F);
  ops::grouped_linear_backward(act, ew.down.data(), offsets, E, dyp, dact, ew.ddown.data(), F, D);
  float* dgate = zeroed(s.dgate, n * k * F);
  float* dup = zeroed(s.dup, n * k * F);
  ops::swiglu_backward(m.experts.gate.data(), m.experts.up.data(), dact, dgate, dup, n * k * F);
  float* xp = sized(s.permuted, n * k * D);
  ops::moe_permute_forward(x, m.routing, xp, D);
  float* dxp = zeroed(s.dpermuted, n * k * D);
  ops::grouped_linear_backward(xp, ew.gate.data(), offsets, E, dgate, dxp, ew.dgate.data(), D, F);
  ops::grouped_linear_backward(xp, ew.up.data(), offsets, E, dup, dxp, ew.dup.data(), D, F);
  ops::moe_permute_backward(dxp, m.routing, dx, D);
  float* dprobs = zeroed(s.dprobs, n * E);
  ops::moe_route_backward(m.probs.data(), m.weights.data(), m.routing, dweights, dprobs);
  ops::moe_aux_loss_backward(m.routing, aux_grad, dprobs);
  float* dlogits = zeroed(s.router_logits, n * E);
  ops::softmax_backward(m.probs.data(), dprobs, dlogits, n, E);
  // The router is replicated and every tp rank computed the same router input gradient; one
  // of them adds it to the partial sums the caller reduces over tp.
  ops::linear_backward(x, w(li.router), dlogits, tp.rank == 0 ? dx : nullptr, g(li.router), n, D,
                       E);
}

// normed: (N, D) -> out: (N, D) (overwritten). Returns the layer's aux loss (0 when dense).
double Transformer::Impl::ffn_forward(LayerActs& a, const LayerIndex& li, const float* normed,
                                      float* out, const Dims& d) {
  if (is_moe()) return moe_forward(a.moe, li, normed, out, d.N);
  mlp_forward(li.mlp, tp.d_ff, a.mlp, normed, out, d.N, false);
  return 0.0;
}

void Transformer::Impl::ffn_backward(LayerActs& a, const LayerIndex& li, const float* normed,
                                     const float* dout, float* dnormed, float aux_grad,
                                     const Dims& d) {
  if (is_moe()) {
    moe_backward(a.moe, li, normed, dout, dnormed, aux_grad, d.N);
    return;
  }
  mlp_backward(li.mlp, tp.d_ff, a.mlp, normed, dout, dnormed, d.N);
}

LayerActs& Transformer::Impl::layer_acts(size_t l) {
  return recompute == config::Recompute::kFull ? work : acts[l];
}

AttnActs& Transformer::Impl::attn_acts(size_t l) {
  return recompute == config::Recompute::kNone ? acts[l].attn : work.attn;
}

// Block l from x_in: (Nr, D) into x_out: (Nr, D). Sequential (pre-norm Llama):
//   h = x + attn(norm1(x)),  out = h + ffn(norm2(h));
// parallel block (MegaScale): out = x + (attn(norm1(x)) + ffn(norm1(x))), the two branches
// sharing one gather of their input and one reduction of their partial sums under tp.
double Transformer::Impl::layer_forward(size_t l, const float* x_in, float* x_out,
                                        const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D;
  const float eps = static_cast<float>(cfg.norm_eps);
  LayerActs& a = layer_acts(l);
  AttnActs& at = attn_acts(l);
  const LayerIndex& li = layers[l];
  float* normed = sized(scratch.normed, nd);
  ops::rmsnorm_forward(x_in, w(li.attn_norm), normed, sized(a.rstd1, d.Nr), d.Nr, D, eps);
  const float* input = gather_rows(normed, D, d, scratch.gathered);
  if (cfg.parallel_block) {
    float* partial = partial_rows(x_out, D, d);
    attention_forward(at, li, input, partial, d);
    const double aux = ffn_forward(a, li, input, sized(scratch.ffn_out, d.N * D), d);
    add_into(partial, scratch.ffn_out.data(), d.N * D);
    reduce_rows(partial, x_out, D, d, false);
    add_into(x_out, x_in, nd);
    return aux;
  }
  float* h = sized(a.h, nd);
  float* partial = partial_rows(h, D, d);
  attention_forward(at, li, input, partial, d);
  reduce_rows(partial, h, D, d, false);
  add_into(h, x_in, nd);
  ops::rmsnorm_forward(h, w(li.ffn_norm), normed, sized(a.rstd2, d.Nr), d.Nr, D, eps);
  input = gather_rows(normed, D, d, scratch.gathered);
  partial = partial_rows(x_out, D, d);
  const double aux = ffn_forward(a, li, input, partial, d);
  reduce_rows(partial, x_out, D, d, false);
  add_into(x_out, h, nd);
  return aux;
}

// dres: (Nr, D) holds d(objective)/d(block output) and is turned, in place, into the gradient
// with respect to the block input. Normed inputs are recomputed from the saved rstd inputs
// (and gathered again under SP, so only the (Nr, D) shard is kept); under recomputation the
// layer's forward runs again first (full), or its attention internals (selective).
void Transformer::Impl::layer_backward(size_t l, float* dres, float aux_grad, const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D, full = d.N * D;
  const float eps = static_cast<float>(cfg.norm_eps);
  const LayerIndex& li = layers[l];
  if (recompute == config::Recompute::kFull) {
    layer_forward(l, acts[l].x.data(), sized(scratch.reduced, nd), d);
  }
  LayerActs& a = layer_acts(l);
  AttnActs& at = attn_acts(l);
  float* normed = sized(scratch.normed, nd);
  if (!cfg.parallel_block) {
    ops::rmsnorm_forward(a.h.data(), w(li.ffn_norm), normed, a.rstd2.data(), d.Nr, D, eps);
    const float* input = gather_rows(normed, D, d, scratch.gathered);
    const float* dout = gather_rows(dres, D, d, scratch.dgathered);
    float* dinput = zeroed(scratch.dnormed, full);
    ffn_backward(a, li, input, dout, dinput, aux_grad, d);
    reduce_rows(dinput, dinput, D, d, false);
    ops::rmsnorm_backward(a.h.data(), w(li.ffn_norm), a.rstd2.data(), dinput, dres,
                          norm_grad_buffer(li.ffn_norm), d.Nr, D);
    reduce_norm_grad(li.ffn_norm, scratch.norm_grad);
  }
  ops::rmsnorm_forward(acts[l].x.data(), w(li.attn_norm), normed, a.rstd1.data(), d.Nr, D, eps);
  const float* input = gather_rows(normed, D, d, scratch.gathered);
  if (recompute == config::Recompute::kSelective) attention_internals(at, li, input, d);
  const float* dout = gather_rows(dres, D, d, scratch.dgathered);
  float* dinput = zeroed(scratch.dnormed, full);
  if (cfg.parallel_block) ffn_backward(a, li, input, dout, dinput, aux_grad, d);
  attention_backward(at, li, input, dout, dinput, d);
  reduce_rows(dinput, dinput, D, d, false);
  ops::rmsnorm_backward(acts[l].x.data(), w(li.attn_norm), a.rstd1.data(), dinput, dres,
                        norm_grad_buffer(li.attn_norm), d.Nr, D);
  reduce_norm_grad(li.attn_norm, scratch.norm_grad);
}

double Transformer::Impl::forward(const int32_t* inputs, const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D;
  embed_forward(inputs, d);
  double aux = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    float* x_out = l + 1 < layers.size() ? sized(acts[l + 1].x, nd) : sized(final_x, nd);
    aux += layer_forward(l, acts[l].x.data(), x_out, d);
  }
  ops::rmsnorm_forward(final_x.data(), w(final_norm), sized(final_normed, nd),
                       sized(final_rstd, d.Nr), d.Nr, D, static_cast<float>(cfg.norm_eps));
  final_input = gather_rows(final_normed.data(), D, d, final_gathered);
  float* out = sized(logits, d.N * tp.vocab_rows);
  if (tp.vocab_rows > 0) ops::linear_forward(final_input, w(lm_head), out, d.N, D, tp.vocab_rows);
  return aux;
}

void Transformer::Impl::notify_layer(size_t l, const BackwardHooks* hooks) const {
  if (hooks == nullptr) return;
  if (hooks->on_grad_ready) {
    for (size_t i = layers[l].end_param; i > layers[l].first_param; --i) hooks->on_grad_ready(i - 1);
  }
  if (hooks->poll) hooks->poll();
}

void Transformer::Impl::backward(const int32_t* inputs, const Dims& d, float aux_grad,
                                 const BackwardHooks* hooks) {
  const int64_t D = cfg.d_model, nd = d.Nr * D;
  float* dres = zeroed(scratch.residual_grad, nd);
  float* dinput = zeroed(scratch.dnormed, d.N * D);
  if (tp.vocab_rows > 0) {
    ops::linear_backward(final_input, w(lm_head), logits.data(), dinput, g(lm_head), d.N, D,
                         tp.vocab_rows);
  }
  reduce_rows(dinput, dinput, D, d, false);
  ops::rmsnorm_backward(final_x.data(), w(final_norm), final_rstd.data(), dinput, dres,
                        norm_grad_buffer(final_norm), d.Nr, D);
  reduce_norm_grad(final_norm, scratch.norm_grad);
  const bool notify = hooks != nullptr && hooks->on_grad_ready;
  if (notify && lm_head != embed) hooks->on_grad_ready(lm_head);
  if (notify) hooks->on_grad_ready(final_norm);
  if (hooks != nullptr && hooks->poll) hooks->poll();
  for (size_t l = layers.size(); l-- > 0;) {
    layer_backward(l, dres, aux_grad, d);
    notify_layer(l, hooks);
  }
  embed_backward(inputs, dres, d);
  if (notify) hooks->on_grad_ready(embed);
}

}  // namespace ms::model
