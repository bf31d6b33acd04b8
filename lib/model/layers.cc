// The Transformer's layers and the whole stack, forward and backward, over a micro-batch of
// N = B*T tokens: per block the pre-norm, the attention (projections, rotary embeddings, the
// tiled kernel of ops/attention.h, the output projection) and the FFN (model/compute.cc), with
// the residual-stream gradient updated in place layer by layer.
//
// With tensor parallelism the same code runs on this rank's heads and d_ff slice (TpState).
// The tp collectives sit at the edges of the column-parallel group reading a normed input and
// of the row-parallel projection after it (model/tp_comm.cc), and the GEMMs on either side of
// each are handed to the collective as RowGemms so that parallel.tp_overlap can run them one
// chunk of rows at a time while the next chunk moves. The parallel block's attention and FFN
// share one gather and one reduction in each direction. Without tp those steps cost nothing.
#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "model/buffers.h"
#include "model/model_impl.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "parallel/cp_layout.h"

namespace ms::model {
namespace {

// y = x W^T over all rows (x null: the gathered rows).
RowGemm forward_gemm(const float* x, const float* w, int64_t in, int64_t out, float* y) {
  return RowGemm{x, w, in, out, false, y};
}

// dx += dy W over all rows (dy null: the gathered rows).
RowGemm input_grad_gemm(const float* dy, const float* w, int64_t in, int64_t out, float* dx) {
  return RowGemm{dy, w, in, out, true, dx};
}

}  // namespace

LayerActs& Transformer::Impl::layer_acts(size_t l) {
  return recompute == config::Recompute::kFull ? work : pass.acts[l];
}

AttnActs& Transformer::Impl::attn_acts(size_t l) {
  return recompute == config::Recompute::kNone ? pass.acts[l].attn : work.attn;
}

RowGemm Transformer::Impl::q_gemm(const LayerIndex& li, AttnActs& at, const Dims& d) {
  const int64_t qd = tp.heads * head_dim();
  return forward_gemm(nullptr, w(li.q), cfg.d_model, qd, sized(at.q, d.N * qd));
}

RowGemm Transformer::Impl::k_gemm(const LayerIndex& li, AttnActs& at, const Dims& d) {
  const int64_t kvd = tp.kv_heads * head_dim();
  return forward_gemm(nullptr, w(li.k), cfg.d_model, kvd, sized(at.k, d.N * kvd));
}

RowGemm Transformer::Impl::v_gemm(const LayerIndex& li, AttnActs& at, const Dims& d) {
  const int64_t kvd = tp.kv_heads * head_dim();
  return forward_gemm(nullptr, w(li.v), cfg.d_model, kvd, sized(at.v, d.N * kvd));
}

void Transformer::Impl::set_documents(const int32_t* inputs, const Dims& d) {
  if (!documents.enabled) return;
  pass.doc.resize(static_cast<size_t>(d.N));
  pass.doc_pos.resize(static_cast<size_t>(d.N));
  if (!cp.active()) {
    document_layout(inputs, d.B, d.T, documents.eod_id, pass.doc.data(), pass.doc_pos.data());
    return;
  }
  // A document may span chunks held by other cp ranks: lay the documents out over the whole
  // sequences, gathered from the group, and keep each rank's tokens' share.
  const int P = cp.size;
  const int64_t T = d.T * P;
  std::vector<int32_t> gathered(static_cast<size_t>(d.N * P)), whole(gathered.size());
  cp.allgather(inputs, gathered.data(), static_cast<size_t>(d.N), DType::kI32);
  for (int r = 0; r < P; ++r) {
    const std::vector<int64_t>& at = cp_layout.index[static_cast<size_t>(r)];
    for (int64_t n = 0; n < d.N; ++n) {
      whole[static_cast<size_t>((n / d.T) * T + at[static_cast<size_t>(n)])] =
          gathered[static_cast<size_t>(r * d.N + n)];
    }
  }
  std::vector<int32_t> doc(whole.size());
  std::vector<int64_t> pos(whole.size());
  document_layout(whole.data(), d.B, T, documents.eod_id, doc.data(), pos.data());
  pass.cp_doc.assign(static_cast<size_t>(P), std::vector<int32_t>(static_cast<size_t>(d.N)));
  for (int r = 0; r < P; ++r) {
    parallel::cp_take(doc.data(), d.B, T, P, r, pass.cp_doc[static_cast<size_t>(r)].data());
  }
  pass.doc = pass.cp_doc[static_cast<size_t>(cp.rank)];
  parallel::cp_take(pos.data(), d.B, T, P, cp.rank, pass.doc_pos.data());
}

ops::AttentionMask Transformer::Impl::attention_mask() const {
  ops::AttentionMask mask;
  if (documents.enabled) {
    mask.q_doc.i32 = pass.doc.data();
    mask.k_doc.i32 = pass.doc.data();
  }
  return mask;
}

void Transformer::Impl::rotate(float* x, int64_t heads, const Dims& d, bool inverse) const {
  // Per-token positions: in the document, or under cp the token's place in the sequence.
  const int64_t* positions = documents.positions ? pass.doc_pos.data()
                             : cp.active()
                                 ? cp_layout.index[static_cast<size_t>(cp.rank)].data()
                                 : nullptr;
  if (positions != nullptr) {
    if (inverse) {
      be->rope_backward_at(x, rope, positions, d.N, heads);
    } else {
      be->rope_forward_at(x, rope, positions, d.N, heads);
    }
    return;
  }
  if (inverse) {
    be->rope_backward(x, rope, d.B, d.T, heads);
  } else {
    be->rope_forward(x, rope, d.B, d.T, heads);
  }
}

void Transformer::Impl::attention_core(AttnActs& a, const Dims& d) {
  rotate(a.q.data(), tp.heads, d, false);
  rotate(a.k.data(), tp.kv_heads, d, false);
  const double t0 = wall_time_s();
  if (cp.active()) {
    cp_attention_forward(a, d);
  } else {
    be->attention_block_forward(attention_shape(d), attention_mask(), a.q.data(), a.k.data(),
                                 a.v.data(), sized(a.attn, d.N * tp.heads * head_dim()),
                                 sized(a.lse, d.B * tp.heads * d.T));
  }
  attention_s += wall_time_s() - t0;
}

// Block l from x_in: (Nr, D) into x_out: (Nr, D). Sequential (pre-norm Llama):
//   h = x + attn(norm1(x)),  out = h + ffn(norm2(h));
// parallel block (MegaScale): out = x + (attn(norm1(x)) + ffn(norm1(x))).
double Transformer::Impl::layer_forward(size_t l, const float* x_in, float* x_out,
                                        const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D, F = tp.d_ff, qd = tp.heads * head_dim();
  const float eps = static_cast<float>(cfg.norm_eps);
  LayerActs& a = layer_acts(l);
  AttnActs& at = attn_acts(l);
  const LayerIndex& li = layers[l];
  const bool moe = is_moe();
  float* normed = sized(scratch.normed, nd);
  be->rmsnorm_forward(x_in, w(li.attn_norm), normed, sized(a.rstd1, d.Nr), d.Nr, D, eps);
  if (cfg.parallel_block) {
    const float* input =
        moe ? gather_rows(normed, D, d, scratch.gathered, {q_gemm(li, at, d), k_gemm(li, at, d),
                                                           v_gemm(li, at, d)})
            : gather_rows(normed, D, d, scratch.gathered,
                          {q_gemm(li, at, d), k_gemm(li, at, d), v_gemm(li, at, d),
                           forward_gemm(nullptr, w(li.mlp.gate), D, F, sized(a.mlp.gate, d.N * F)),
                           forward_gemm(nullptr, w(li.mlp.up), D, F, sized(a.mlp.up, d.N * F))});
    attention_core(at, d);
    const RowGemm o = forward_gemm(at.attn.data(), w(li.o), qd, D, nullptr);
    double aux = 0;
    if (moe) {
      aux = moe_forward(a.moe, li, input, sized(scratch.ffn_out, d.N * D), d.N);
      reduce_rows({o}, scratch.ffn_out.data(), x_out, D, d, false);
    } else {
      float* act = sized(scratch.act, d.N * F);
      be->swiglu_forward(a.mlp.gate.data(), a.mlp.up.data(), act, d.N * F);
      reduce_rows({o, forward_gemm(act, w(li.mlp.down), F, D, nullptr)}, nullptr, x_out, D, d,
                  false);
    }
    be->add_into(x_out, x_in, nd);
    return aux;
  }
  gather_rows(normed, D, d, scratch.gathered,
              {q_gemm(li, at, d), k_gemm(li, at, d), v_gemm(li, at, d)});
  attention_core(at, d);
  float* h = sized(a.h, nd);
  reduce_rows({forward_gemm(at.attn.data(), w(li.o), qd, D, nullptr)}, nullptr, h, D, d, false);
  be->add_into(h, x_in, nd);
  be->rmsnorm_forward(h, w(li.ffn_norm), normed, sized(a.rstd2, d.Nr), d.Nr, D, eps);
  double aux = 0;
  if (moe) {
    const float* input = gather_rows(normed, D, d, scratch.gathered);
    aux = moe_forward(a.moe, li, input, sized(scratch.ffn_out, d.N * D), d.N);
    reduce_rows({}, scratch.ffn_out.data(), x_out, D, d, false);
  } else {
    gather_rows(normed, D, d, scratch.gathered,
                {forward_gemm(nullptr, w(li.mlp.gate), D, F, sized(a.mlp.gate, d.N * F)),
                 forward_gemm(nullptr, w(li.mlp.up), D, F, sized(a.mlp.up, d.N * F))});
    float* act = sized(scratch.act, d.N * F);
    be->swiglu_forward(a.mlp.gate.data(), a.mlp.up.data(), act, d.N * F);
    reduce_rows({forward_gemm(act, w(li.mlp.down), F, D, nullptr)}, nullptr, x_out, D, d, false);
  }
  be->add_into(x_out, h, nd);
  return aux;
}

// With scratch.dattn holding d(attention output) (N, H*hd): the weight gradients of o, q, k,
// v and, in scratch.dq/dk/dv, the gradients the input-gradient GEMMs of the reduction read.
// input: the gathered normed input (N, D).
void Transformer::Impl::attention_backward(AttnActs& at, const LayerIndex& li,
                                           const float* input, const float* dout,
                                           const Dims& d) {
  const int64_t D = cfg.d_model, qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
  Scratch& s = scratch;
  weight_grad(li.o, at.attn.data(), dout, d.N, qd, D);
  float* dq = zeroed(s.dq, d.N * qd);
  float* dk = zeroed(s.dk, d.N * kvd);
  float* dv = zeroed(s.dv, d.N * kvd);
  const double t0 = wall_time_s();
  if (cp.active()) {
    cp_attention_backward(at, s.dattn.data(), dq, dk, dv, d);
  } else {
    be->attention_block_backward(attention_shape(d), attention_mask(), at.q.data(),
                                  at.k.data(), at.v.data(), at.attn.data(), at.lse.data(),
                                  s.dattn.data(), dq, dk, dv);
  }
  attention_s += wall_time_s() - t0;
  rotate(dq, tp.heads, d, true);
  rotate(dk, tp.kv_heads, d, true);
  weight_grad(li.q, input, dq, d.N, D, qd);
  weight_grad(li.k, input, dk, d.N, D, kvd);
  weight_grad(li.v, input, dv, d.N, D, kvd);
}

// With scratch.dact holding d(SwiGLU product) (N, F): the weight gradients of down, gate and
// up, and in scratch.dgate/dup what the input-gradient GEMMs of the reduction read.
void Transformer::Impl::dense_ffn_backward(MlpActs& acts, const LayerIndex& li,
                                           const float* input, const float* dout,
                                           const Dims& d) {
  const int64_t D = cfg.d_model, F = tp.d_ff;
  Scratch& s = scratch;
  float* act = sized(s.act, d.N * F);
  be->swiglu_forward(acts.gate.data(), acts.up.data(), act, d.N * F);
  weight_grad(li.mlp.down, act, dout, d.N, F, D);
  float* dgate = zeroed(s.dgate, d.N * F);
  float* dup = zeroed(s.dup, d.N * F);
  be->swiglu_backward(acts.gate.data(), acts.up.data(), s.dact.data(), dgate, dup, d.N * F);
  weight_grad(li.mlp.gate, input, dgate, d.N, D, F);
  weight_grad(li.mlp.up, input, dup, d.N, D, F);
}

// dres: (Nr, D) holds d(objective)/d(block output) and is turned, in place, into the gradient
// with respect to the block input. Normed inputs are recomputed from the saved rstd inputs
// (and gathered again under SP, so only the (Nr, D) shard is kept); under recomputation the
// layer's forward runs again first (full), or its attention internals (selective).
void Transformer::Impl::layer_backward(size_t l, float* dres, float aux_grad, const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D, F = tp.d_ff;
  const int64_t qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
  const float eps = static_cast<float>(cfg.norm_eps);
  const LayerIndex& li = layers[l];
  const bool moe = is_moe();
  if (recompute == config::Recompute::kFull) {
    recomputing = true;
    layer_forward(l, pass.acts[l].x.data(), sized(scratch.reduced, nd), d);
    recomputing = false;
  }
  LayerActs& a = layer_acts(l);
  AttnActs& at = attn_acts(l);
  Scratch& s = scratch;
  float* normed = sized(s.normed, nd);
  float* dnormed = sized(s.dnormed, nd);
  if (!cfg.parallel_block) {
    be->rmsnorm_forward(a.h.data(), w(li.ffn_norm), normed, a.rstd2.data(), d.Nr, D, eps);
    const float* input = gather_rows(normed, D, d, s.gathered);
    if (moe) {
      const float* dout = gather_rows(dres, D, d, s.dgathered);
      float* dinput = zeroed(s.residual_partial, d.N * D);
      moe_backward(a.moe, li, input, dout, dinput, aux_grad, d.N);
      reduce_rows({}, dinput, dnormed, D, d, false);
    } else {
      const float* dout =
          gather_rows(dres, D, d, s.dgathered,
                      {input_grad_gemm(nullptr, w(li.mlp.down), F, D, zeroed(s.dact, d.N * F))});
      dense_ffn_backward(a.mlp, li, input, dout, d);
      reduce_rows({input_grad_gemm(s.dgate.data(), w(li.mlp.gate), D, F, nullptr),
                   input_grad_gemm(s.dup.data(), w(li.mlp.up), D, F, nullptr)},
                  nullptr, dnormed, D, d, false);
    }
    be->rmsnorm_backward(a.h.data(), w(li.ffn_norm), a.rstd2.data(), dnormed, dres,
                          norm_grad_buffer(li.ffn_norm), d.Nr, D);
    reduce_norm_grad(li.ffn_norm, s.norm_grad);
  }
  be->rmsnorm_forward(pass.acts[l].x.data(), w(li.attn_norm), normed, a.rstd1.data(), d.Nr, D,
                       eps);
  const bool selective = recompute == config::Recompute::kSelective;
  const float* input =
      selective ? gather_rows(normed, D, d, s.gathered,
                              {q_gemm(li, at, d), k_gemm(li, at, d), v_gemm(li, at, d)})
                : gather_rows(normed, D, d, s.gathered);
  if (selective) attention_core(at, d);
  const RowGemm do_x = input_grad_gemm(nullptr, w(li.o), qd, D, zeroed(s.dattn, d.N * qd));
  const bool dense_block = cfg.parallel_block && !moe;
  const float* dout =
      dense_block
          ? gather_rows(dres, D, d, s.dgathered,
                        {do_x, input_grad_gemm(nullptr, w(li.mlp.down), F, D,
                                               zeroed(s.dact, d.N * F))})
          : gather_rows(dres, D, d, s.dgathered, {do_x});
  const float* ffn_dinput = nullptr;
  if (cfg.parallel_block && moe) {
    float* dinput = zeroed(s.residual_partial, d.N * D);
    moe_backward(a.moe, li, input, dout, dinput, aux_grad, d.N);
    ffn_dinput = dinput;
  } else if (dense_block) {
    dense_ffn_backward(a.mlp, li, input, dout, d);
  }
  attention_backward(at, li, input, dout, d);
  // After attention_backward, which sizes the gradients these read.
  const RowGemm dq_x = input_grad_gemm(s.dq.data(), w(li.q), D, qd, nullptr);
  const RowGemm dk_x = input_grad_gemm(s.dk.data(), w(li.k), D, kvd, nullptr);
  const RowGemm dv_x = input_grad_gemm(s.dv.data(), w(li.v), D, kvd, nullptr);
  if (dense_block) {
    reduce_rows({dq_x, dk_x, dv_x, input_grad_gemm(s.dgate.data(), w(li.mlp.gate), D, F, nullptr),
                 input_grad_gemm(s.dup.data(), w(li.mlp.up), D, F, nullptr)},
                nullptr, dnormed, D, d, false);
  } else {
    reduce_rows({dq_x, dk_x, dv_x}, ffn_dinput, dnormed, D, d, false);
  }
  be->rmsnorm_backward(pass.acts[l].x.data(), w(li.attn_norm), a.rstd1.data(), dnormed, dres,
                        norm_grad_buffer(li.attn_norm), d.Nr, D);
  reduce_norm_grad(li.attn_norm, s.norm_grad);
}

void Transformer::Impl::weight_grad(size_t param, const float* x, const float* dy, int64_t n,
                                    int64_t in, int64_t out) {
  if (defer_into == nullptr) {
    be->linear_backward(x, nullptr, dy, nullptr, g(param), n, in, out);
    return;
  }
  DeferredGemm& gemm = defer_into->emplace_back();
  gemm.param = param;
  gemm.x.assign(x, x + n * in);
  gemm.dy.assign(dy, dy + n * out);
  gemm.n = n;
  gemm.in = in;
  gemm.out = out;
}

double Transformer::Impl::forward(const int32_t* inputs, const float* x_in, const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D;
  pass.acts.resize(layers.size());
  pass.d = d;
  pass.z_sum = 0;
  set_cp_layout(d);
  set_documents(inputs, d);
  if (chunk.first) {
    embed_forward(inputs, d);
  } else {
    std::copy(x_in, x_in + nd, sized(pass.acts[0].x, nd));
  }
  double aux = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    float* x_out = l + 1 < layers.size() ? sized(pass.acts[l + 1].x, nd) : sized(pass.final_x, nd);
    aux += layer_forward(l, pass.acts[l].x.data(), x_out, d);
  }
  if (!chunk.last) return aux;
  PassActs& p = pass;
  be->rmsnorm_forward(p.final_x.data(), w(final_norm), sized(p.final_normed, nd),
                       sized(p.final_rstd, d.Nr), d.Nr, D, static_cast<float>(cfg.norm_eps));
  float* out = sized(p.logits, d.N * tp.vocab_rows);
  if (tp.vocab_rows > 0) {
    p.final_input = gather_rows(p.final_normed.data(), D, d, p.final_gathered,
                                {forward_gemm(nullptr, w(lm_head), D, tp.vocab_rows, out)});
  } else {
    p.final_input = gather_rows(p.final_normed.data(), D, d, p.final_gathered);
  }
  return aux;
}

void Transformer::Impl::notify_layer(size_t l, const BackwardHooks* hooks) const {
  if (hooks == nullptr) return;
  if (hooks->on_grad_ready) {
    for (size_t i = layers[l].end_param; i > layers[l].first_param; --i) hooks->on_grad_ready(i - 1);
  }
  if (hooks->poll) hooks->poll();
}

void Transformer::Impl::backward(const float* dout, float* din, const Dims& d,
                                 const BackwardHooks* hooks) {
  const int64_t D = cfg.d_model, nd = d.Nr * D;
  PassActs& p = pass;
  float* dres = sized(scratch.residual_grad, nd);
  const bool notify = hooks != nullptr && hooks->on_grad_ready;
  if (chunk.last) {
    std::fill(dres, dres + nd, 0.0f);
    float* dnormed = sized(scratch.dnormed, nd);
    if (tp.vocab_rows > 0) {
      weight_grad(lm_head, p.final_input, p.logits.data(), d.N, D, tp.vocab_rows);
      reduce_rows({input_grad_gemm(p.logits.data(), w(lm_head), D, tp.vocab_rows, nullptr)},
                  nullptr, dnormed, D, d, false);
    } else {
      reduce_rows({}, nullptr, dnormed, D, d, false);
    }
    be->rmsnorm_backward(p.final_x.data(), w(final_norm), p.final_rstd.data(), dnormed, dres,
                          norm_grad_buffer(final_norm), d.Nr, D);
    reduce_norm_grad(final_norm, scratch.norm_grad);
    if (notify && lm_head != embed) hooks->on_grad_ready(lm_head);
    if (notify) hooks->on_grad_ready(final_norm);
    if (hooks != nullptr && hooks->poll) hooks->poll();
  } else {
    std::copy(dout, dout + nd, dres);
  }
  for (size_t l = layers.size(); l-- > 0;) {
    layer_backward(l, dres, p.aux_grad, d);
    notify_layer(l, hooks);
  }
  if (chunk.first) {
    embed_backward(p.inputs.data(), dres, d);
    if (notify) hooks->on_grad_ready(embed);
  } else {
    std::copy(dres, dres + nd, din);
  }
}

}  // namespace ms::model
