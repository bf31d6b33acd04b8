// The MoE FFN over a whole micro-batch (routing, expert GEMMs, combine, the load-balancing and
// router z-losses), forward and backward, for training and serving alike: each expert is the
// SwiGLU MLP (model/blocks/mlp.cc's pieces) over all of its rows, the experts' backward one
// grouped GEMM per projection. Under tensor parallelism it runs on this rank's d_ff slice
// (TpState); under expert parallelism the rows make their round trip to the ranks holding their
// experts (parallel/ep_exchange.h) and the same experts_forward / experts_backward run there,
// chunk by chunk. Cached passes call the routing and the combine separately
// (moe_dispatch, moe_combine) so the experts may run on another rank (infer/disaggregated.h).
#include <algorithm>
#include <cmath>

#include "model/model_impl.h"
#include "parallel/tp_overlap.h"

namespace ms::model {

// The weights of a layer's experts held here and where their gradients go.
struct Transformer::Impl::ExpertGrads {
  std::vector<const float*> gate, up, down;
  std::vector<float*> dgate, dup, ddown;
};

namespace {

using ExpertGrads = Transformer::Impl::ExpertGrads;

ExpertGrads expert_grads(Transformer::Impl& m, const LayerIndex& li) {
  ExpertGrads e;
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

// Under parallel.expert_tp false each tp rank's expert weight gradients cover only its tokens:
// the backward writes this micro-batch's into `buffer` (the local experts' gate, up and down
// gradients back to back; zeroed when `zero`, once per layer), which commit_expert_grads sums
// over tp into the gradients.
void redirect_expert_grads(Transformer::Impl& m, const LayerIndex& li, ExpertGrads& e,
                           Floats& buffer, bool zero) {
  int64_t total = 0;
  for (const MlpIndex& x : li.experts) {
    for (size_t p : {x.gate, x.up, x.down}) total += m.params[p].grad.numel();
  }
  float* at = zero ? m.zeroed(buffer, total) : buffer.data();
  for (size_t i = 0; i < li.experts.size(); ++i) {
    const MlpIndex& x = li.experts[i];
    e.dgate[i] = at;
    at += m.params[x.gate].grad.numel();
    e.dup[i] = at;
    at += m.params[x.up].grad.numel();
    e.ddown[i] = at;
    at += m.params[x.down].grad.numel();
  }
}

}  // namespace

void Transformer::Impl::commit_expert_grads(const LayerIndex& li, Floats& buffer) {
  tp.allreduce(buffer.data(), static_cast<int64_t>(buffer.size()));
  const float* at = buffer.data();
  for (const MlpIndex& x : li.experts) {
    for (size_t p : {x.gate, x.up, x.down}) {
      const int64_t n = params[p].grad.numel();
      be->add_into(g(p), at, n);
      at += n;
    }
  }
}

namespace {

// The dispatch rows of this tp rank's tokens when parallel.expert_tp is false: expert by
// expert, the run of its rows whose tokens fall in the rank's share (rows keep token order).
void slice_rows(const ops::MoeRouting& r, const parallel::TpChunk& tokens,
                std::vector<int64_t>& rows, std::vector<int64_t>& offsets) {
  rows.clear();
  offsets.assign(static_cast<size_t>(r.experts + 1), 0);
  for (int64_t e = 0; e < r.experts; ++e) {
    for (int64_t row = r.offsets[static_cast<size_t>(e)]; row < r.offsets[static_cast<size_t>(e + 1)]; ++row) {
      const int64_t t = r.token_of_row[static_cast<size_t>(row)];
      if (t >= tokens.row0 && t < tokens.row0 + tokens.rows) rows.push_back(row);
    }
    offsets[static_cast<size_t>(e + 1)] = static_cast<int64_t>(rows.size());
  }
}

}  // namespace

void Transformer::Impl::record_load(const LayerIndex& li, const ops::MoeRouting& r) {
  if (recomputing) return;  // the layer's forward already counted
  const size_t l = static_cast<size_t>(&li - layers.data());
  load_routed.resize(layers.size());
  load_dropped.resize(layers.size(), 0);
  std::vector<int64_t>& counts = load_routed[l];
  counts.resize(static_cast<size_t>(r.experts), 0);
  for (size_t e = 0; e < static_cast<size_t>(r.experts); ++e) {
    counts[e] += r.offsets[e + 1] - r.offsets[e];
  }
  load_dropped[l] += r.dropped;
  load_chosen.resize(layers.size());
  std::vector<int64_t>& chosen = load_chosen[l];
  chosen.resize(static_cast<size_t>(r.experts), 0);
  for (size_t e = 0; e < static_cast<size_t>(r.experts); ++e) chosen[e] += r.routed[e];
}

// x: (n, D) -> the routing in m (router probabilities, renormalized top-k weights, grouping;
// with `capacity`, model.moe.capacity_factor's drops) and xp: (rows, D) the rows of x each
// expert receives, grouped by expert.
void Transformer::Impl::moe_dispatch(MoeActs& m, const LayerIndex& li, const float* x,
                                     Floats& xp, int64_t n, bool capacity) {
  const int64_t D = cfg.d_model, E = cfg.moe.num_experts, k = cfg.moe.top_k;
  float* logits = sized(scratch.router_logits, n * E);
  be->linear_forward(x, w(li.router), logits, n, D, E);
  be->softmax_forward(logits, sized(m.probs, n * E), n, E);
  if (cfg.moe.z_loss_coef > 0) {
    const double z = be->moe_z_loss(logits, sized(m.lse, n), n, E);
    if (capacity && !recomputing) pass.z_sum += z / static_cast<double>(n);
  }
  const float* bias = li.expert_bias == kNoParam ? nullptr : w(li.expert_bias);
  m.routing = be->moe_route(m.probs.data(), sized(m.weights, n * k), n, E, k, bias);
  if (capacity) {
    be->moe_apply_capacity(m.routing, ops::moe_capacity(cfg.moe.capacity_factor, n, E, k));
  }
  be->moe_permute_forward(x, m.routing, sized(xp, n * k * D), D);
}

// xp: rows grouped by expert (expert e's rows are [offsets[e], offsets[e + 1])) -> yp, the same
// rows: one SwiGLU MLP per expert, each GEMM through linear()/linears() (the f32 weights, or
// the serving hook for quantized ones). Experts with no rows are skipped and read no weights, so
// a rank holding only some experts' weights may call this with zero rows for the others.
// offsets[0] may be a chunk's first row (expert parallelism runs a round trip's chunks in turn):
// acts, which keeps the gate/up projections for the backward, keeps the earlier rows. `poll`
// (may be empty) runs between experts, letting exchanges in flight progress.
void Transformer::Impl::experts_forward(const LayerIndex& li, MlpActs& acts, const float* xp,
                                        const int64_t* offsets, float* yp,
                                        const std::function<void()>& poll) {
  const int64_t D = cfg.d_model, E = static_cast<int64_t>(li.experts.size()), F = tp.expert_d_ff;
  const int64_t first = offsets[0], end = offsets[E];
  float* gate = sized(acts.gate, end * F);
  float* up = sized(acts.up, end * F);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    if (n == 0) continue;
    const MlpIndex& m = li.experts[static_cast<size_t>(e)];
    const SameInputLinear gate_up[] = {{m.gate, gate + r0 * F, F}, {m.up, up + r0 * F, F}};
    linears(gate_up, xp + r0 * D, n, D);
    if (poll) poll();
  }
  float* act = sized(scratch.act, end * F);
  be->swiglu_forward(gate + first * F, up + first * F, act + first * F, (end - first) * F);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
    if (n == 0) continue;
    linear(li.experts[static_cast<size_t>(e)].down, act + r0 * F, yp + r0 * D, n, F, D);
    if (poll) poll();
  }
}

// The backward of experts_forward over the same rows (offsets), from dyp, their outputs'
// gradients: dxp's rows (zeroed first) and the weight gradients in `grads`, one grouped GEMM
// per projection. Buffers are sized to total_rows, all of a round trip's chunks.
void Transformer::Impl::experts_backward(const LayerIndex& li, const MlpActs& acts,
                                         const float* xp, const int64_t* offsets,
                                         const float* dyp, float* dxp, const ExpertGrads& grads,
                                         int64_t total_rows, const std::function<void()>& poll) {
  const int64_t D = cfg.d_model, E = static_cast<int64_t>(li.experts.size()), F = tp.expert_d_ff;
  const int64_t first = offsets[0], rows = offsets[E] - first;
  Scratch& s = scratch;
  const float* gate = acts.gate.data() + first * F;
  const float* up = acts.up.data() + first * F;
  float* act = sized(s.act, total_rows * F);
  be->swiglu_forward(gate, up, act + first * F, rows * F);
  float* dact = sized(s.dact, total_rows * F);
  be->fill(dact + first * F, rows * F, 0.0f);
  be->grouped_linear_backward(act, grads.down.data(), offsets, E, dyp, dact, grads.ddown.data(),
                              F, D);
  if (poll) poll();
  float* dgate = sized(s.dgate, total_rows * F);
  float* dup = sized(s.dup, total_rows * F);
  be->fill(dgate + first * F, rows * F, 0.0f);
  be->fill(dup + first * F, rows * F, 0.0f);
  be->swiglu_backward(gate, up, dact + first * F, dgate + first * F, dup + first * F, rows * F);
  be->fill(dxp + first * D, rows * D, 0.0f);
  be->grouped_linear_backward(xp, grads.gate.data(), offsets, E, dgate, dxp, grads.dgate.data(),
                              D, F);
  be->grouped_linear_backward(xp, grads.up.data(), offsets, E, dup, dxp, grads.dup.data(), D, F);
  if (poll) poll();
}

// yp: (n * k, D) expert outputs in dispatch order -> out: (n, D) = the routing-weighted sum of
// each token's experts, plus the shared expert over x: (n, D) when configured.
void Transformer::Impl::moe_combine(const MoeActs& m, const LayerIndex& li, const float* x,
                                    const float* yp, float* out, MlpActs& shared, int64_t n) {
  be->moe_unpermute_forward(yp, m.weights.data(), m.routing, out, cfg.d_model);
  if (cfg.moe.shared_expert_d_ff > 0) {
    mlp_forward(li.shared, tp.shared_d_ff, shared, x, out, Dims::rows(n), MlpRows::kWholeAdd);
  }
}

double Transformer::Impl::moe_forward(MoeActs& m, const LayerIndex& li, const float* x,
                                      float* out, int64_t n) {
  const int64_t D = cfg.d_model, k = cfg.moe.top_k;
  moe_dispatch(m, li, x, scratch.permuted, n, true);
  record_load(li, m.routing);
  float* yp = sized(m.expert_out, n * k * D);
  const bool split = tp.expert_tokens_split;
  if (!ep.active() && !split) {
    experts_forward(li, m.experts, scratch.permuted.data(), m.routing.offsets.data(), yp);
    moe_combine(m, li, x, yp, out, m.shared, n);
    return moe_aux_loss(m);
  }
  // Whole experts under tp (parallel.expert_tp false): this rank's share of the tokens only;
  // the other rows' outputs stay zero, so the sum over tp that follows completes them.
  if (split) be->fill(yp, m.routing.rows() * D, 0.0f);
  if (!ep.active()) {
    slice_rows(m.routing, parallel::tp_chunk(n, tp.size, tp.rank), m.slice_rows,
               m.slice_offsets);
    const int64_t rows = static_cast<int64_t>(m.slice_rows.size());
    float* xs = sized(scratch.ep_grad, rows * D);
    be->gather_rows(scratch.permuted.data(), m.slice_rows.data(), rows, D, xs);
    float* ys = sized(scratch.ep_out, rows * D);
    experts_forward(li, m.experts, xs, m.slice_offsets.data(), ys);
    be->scatter_rows(ys, m.slice_rows.data(), rows, D, yp);
    moe_combine(m, li, x, yp, out, m.shared, n);
    return moe_aux_loss(m);
  }
  // The rows go to the ranks holding their experts and their outputs come back, chunk by
  // chunk; the shared expert computes while the first chunk is on its way.
  // The tokens whose rows travel: all, or with whole experts under tp this tp rank's share.
  ep.plan_routing(m.routing, split ? parallel::tp_chunk(n, tp.size, tp.rank)
                                   : parallel::TpChunk{0, n},
                  m.ep);
  const int64_t rows = m.ep.rows.back();
  float* at = sized(m.ep_input, rows * D);
  float* y = sized(scratch.ep_out, rows * D);
  const bool shared = cfg.moe.shared_expert_d_ff > 0;
  float* shared_out = shared ? sized(scratch.ep_shared, n * D) : nullptr;
  std::function<void()> before;
  if (shared) {
    before = [&] {
      mlp_forward(li.shared, tp.shared_d_ff, m.shared, x, shared_out, Dims::rows(n),
                  MlpRows::kWhole);
    };
  }
  const int64_t El = static_cast<int64_t>(li.experts.size());
  const std::function<void()> poll = [this] { (void)ep.poll(); };  // a failure ends the step
  ep.round_trip(m.ep, scratch.permuted.data(), at, y, yp, D, before, [&](int c) {
    experts_forward(li, m.experts, at, m.ep.rows.data() + c * El, y, poll);
  });
  be->moe_unpermute_forward(yp, m.weights.data(), m.routing, out, D);
  if (shared) be->add_into(out, shared_out, n * D);
  return moe_aux_loss(m);
}

// The layer's load-balancing loss over its micro-batch. Under context parallelism the
// micro-batch's tokens are spread over the cp group, so the assignment counts and probability
// sums are summed over it first (the loss is not a mean of per-rank losses), and the share of
// each expert kept for the backward (m.aux_share); every cp rank returns the same loss.
double Transformer::Impl::moe_aux_loss(MoeActs& m) {
  if (!cp.active()) return be->moe_aux_loss(m.probs.data(), m.routing);
  const ops::MoeRouting& r = m.routing;
  const size_t E = static_cast<size_t>(r.experts);
  std::vector<double> sums(2 * E + 1, 0.0);  // [assignments][probability sums][tokens]
  for (size_t e = 0; e < E; ++e) sums[e] = static_cast<double>(r.routed[e]);
  be->moe_probability_sums(m.probs.data(), r.tokens, r.experts, sums.data() + E);
  sums[2 * E] = static_cast<double>(r.tokens);
  // Gathered as 8-byte words and summed in rank order, so every rank holds the same bits.
  std::vector<double> all(sums.size() * static_cast<size_t>(cp.size), 0.0);
  cp.allgather(sums.data(), all.data(), sums.size(), DType::kI64);
  for (size_t j = 0; j < sums.size(); ++j) {
    double total = 0;
    for (size_t rank = 0; rank < static_cast<size_t>(cp.size); ++rank) {
      total += all[rank * sums.size() + j];
    }
    sums[j] = total;
  }
  const double n = sums[2 * E];
  m.aux_share.assign(E, 0.0);
  double loss = 0;
  for (size_t e = 0; e < E; ++e) {
    m.aux_share[e] = sums[e] / (n * static_cast<double>(r.top_k));
    loss += m.aux_share[e] * (sums[E + e] / n);
  }
  return static_cast<double>(E) * loss;
}

// Without expert parallelism: every expert's backward over its rows of the dispatch, from
// dyp: (n * k, D) the expert outputs' gradients; accumulates dx: (n, D) and the experts'
// weight gradients.
void Transformer::Impl::local_experts_backward(const LayerIndex& li, MoeActs& m, const float* x,
                                               const float* dyp, float* dx, int64_t n) {
  const int64_t D = cfg.d_model, k = cfg.moe.top_k;
  Scratch& s = scratch;
  ExpertGrads ew = expert_grads(*this, li);
  const int64_t El = static_cast<int64_t>(li.experts.size());
  const bool split = tp.expert_tokens_split;
  // Split tokens: the experts ran over this tp rank's rows only, gathered (m.slice_rows).
  const int64_t* offsets = split ? m.slice_offsets.data() : m.routing.offsets.data();
  const int64_t rows = offsets[El];
  float* xp = sized(s.permuted, n * k * D);
  if (!split) {
    be->moe_permute_forward(x, m.routing, xp, D);
  } else {
    // This rank's rows only, each its token's input.
    std::vector<int64_t> tokens(m.slice_rows.size());
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = m.routing.token_of_row[static_cast<size_t>(m.slice_rows[i])];
    }
    be->gather_rows(x, tokens.data(), rows, D, xp);
    float* dy = sized(s.ep_grad, rows * D);
    be->gather_rows(dyp, m.slice_rows.data(), rows, D, dy);
    dyp = dy;
    redirect_expert_grads(*this, li, ew, s.expert_grads, true);
  }
  float* dxp = sized(s.dpermuted, rows * D);
  experts_backward(li, m.experts, xp, offsets, dyp, dxp, ew, rows, {});
  if (split) {
    float* all = zeroed(s.ep_back, m.routing.rows() * D);
    be->scatter_rows(dxp, m.slice_rows.data(), rows, D, all);
    dxp = all;
    commit_expert_grads(li, s.expert_grads);
  }
  be->moe_permute_backward(dxp, m.routing, dx, D);
}

// Accumulates dx: (n, D) and every expert, router and shared-expert gradient from dout: (n, D);
// aux_grad is d(objective)/d(this layer's aux loss).
void Transformer::Impl::moe_backward(MoeActs& m, const LayerIndex& li, const float* x,
                                     const float* dout, float* dx, float aux_grad, int64_t n) {
  const int64_t D = cfg.d_model, E = cfg.moe.num_experts, k = cfg.moe.top_k;
  Scratch& s = scratch;
  const bool shared = cfg.moe.shared_expert_d_ff > 0;
  if (shared && !ep.active()) mlp_backward(li.shared, tp.shared_d_ff, m.shared, x, dout, dx, n);
  float* dyp = zeroed(s.dexpert_out, n * k * D);
  float* dweights = zeroed(s.dweights, n * k);
  be->moe_unpermute_backward(m.expert_out.data(), m.weights.data(), m.routing, dout, dyp,
                              dweights, D);
  // Under tp each rank's expert outputs are partial sums over its d_ff slice, and so are the
  // routing weights' gradients: summed here, the router's backward is the same on every rank.
  tp.allreduce(dweights, n * k);
  if (!ep.active()) {
    local_experts_backward(li, m, x, dyp, dx, n);
  } else {
    // The output gradients travel the forward's way to the experts and the input gradients
    // come back, chunk by chunk; the shared expert's backward runs while the first is away.
    const int64_t rows = m.ep.rows.back();
    float* dy = sized(s.ep_grad, rows * D);
    float* dxp = sized(s.dpermuted, rows * D);
    // Whole experts under tp: rows of other tp ranks' tokens come back as nothing.
    const bool split = tp.expert_tokens_split;
    float* back = split ? zeroed(s.ep_back, n * k * D) : sized(s.ep_back, n * k * D);
    ExpertGrads ew = expert_grads(*this, li);
    if (split) redirect_expert_grads(*this, li, ew, s.expert_grads, true);
    std::function<void()> before;
    if (shared) before = [&] { mlp_backward(li.shared, tp.shared_d_ff, m.shared, x, dout, dx, n); };
    const int64_t El = static_cast<int64_t>(li.experts.size());
    const std::function<void()> poll = [this] { (void)ep.poll(); };  // a failure ends the step
    ep.round_trip(m.ep, dyp, dy, dxp, back, D, before, [&](int c) {
      experts_backward(li, m.experts, m.ep_input.data(), m.ep.rows.data() + c * El, dy, dxp, ew,
                       rows, poll);
    });
    if (split) commit_expert_grads(li, s.expert_grads);
    be->moe_permute_backward(back, m.routing, dx, D);
  }
  float* dprobs = zeroed(s.dprobs, n * E);
  be->moe_route_backward(m.probs.data(), m.weights.data(), m.routing, dweights, dprobs);
  if (!cp.active()) {
    be->moe_aux_loss_backward(m.routing, aux_grad, dprobs);
  } else {
    // d aux / d p_ie = E f_e / n over the whole micro-batch; the optimizer averages the cp
    // ranks' gradients, so each rank applies cp times its share: E f_e / (local tokens).
    std::vector<float> grads(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      grads[static_cast<size_t>(e)] = static_cast<float>(
          aux_grad * static_cast<double>(E) * m.aux_share[static_cast<size_t>(e)] /
          static_cast<double>(m.routing.tokens));
    }
    be->add_to_columns(dprobs, grads.data(), n, E);
  }
  float* dlogits = zeroed(s.router_logits, n * E);
  be->softmax_backward(m.probs.data(), dprobs, dlogits, n, E);
  if (cfg.moe.z_loss_coef > 0) {
    // d/dl_ij of mean_i lse_i^2 = (2 / n) lse_i softmax_ij.
    const float scale = 2.0f * pass.z_grad / static_cast<float>(n);
    be->moe_z_loss_backward(m.probs.data(), m.lse.data(), scale, dlogits, n, E);
  }
  // The router is replicated and every tp rank computed the same router input gradient; one
  // of them adds it to the partial sums the caller reduces over tp.
  be->linear_backward(x, w(li.router), dlogits, tp.rank == 0 ? dx : nullptr, g(li.router), n, D,
                       E);
}

}  // namespace ms::model
