// The Transformer's layers and the whole stack, forward and backward, over a micro-batch of
// N = B*T tokens: each block composed of the blocks in model/blocks/ (norm, attention, the
// dense SwiGLU MLP or the MoE FFN), the embedding first and the output layer last, with the
// residual-stream gradient updated in place layer by layer.
//
// With tensor parallelism the same code runs on this rank's heads and d_ff slice (TpState).
// The tp exchanges sit at the edges of the column-parallel group reading a normed input and of
// the row-parallel projection after it (project_in / project_out, parallel/tp_rows.h), with the
// GEMMs on either side handed to them so that parallel.tp_overlap can run them one chunk of
// rows at a time while the next chunk moves. The parallel block's attention and FFN share one
// gather and one reduction in each direction. Without tp those steps cost nothing.
#include <algorithm>
#include <vector>

#include "model/model_impl.h"

namespace ms::model {

using parallel::input_grad_gemm;

LayerActs& Transformer::Impl::layer_acts(size_t l) {
  return recompute == config::Recompute::kFull ? work : pass.acts[l];
}

AttnActs& Transformer::Impl::attn_acts(size_t l) {
  return recompute == config::Recompute::kNone ? pass.acts[l].attn : work.attn;
}

// Block l from x_in: (Nr, D) into x_out: (Nr, D). Sequential (pre-norm Llama):
//   h = x + attn(norm1(x)),  out = h + ffn(norm2(h));
// parallel block (MegaScale): out = x + (attn(norm1(x)) + ffn(norm1(x))).
double Transformer::Impl::layer_forward(size_t l, const float* x_in, float* x_out,
                                        const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D, F = tp.d_ff;
  LayerActs& a = layer_acts(l);
  AttnActs& at = attn_acts(l);
  const LayerIndex& li = layers[l];
  const bool moe = is_moe();
  float* normed = sized(scratch.normed, nd);
  norm_forward(li.attn_norm, x_in, normed, a.rstd1, d.Nr);
  if (cfg.parallel_block) {
    double aux = 0;
    if (moe) {
      const float* input = attention_forward(li, at, normed, d);
      aux = moe_forward(a.moe, li, input, sized(scratch.ffn_out, d.N * D), d.N);
      attention_output(li, at, scratch.ffn_out.data(), x_out, d);
    } else {
      attention_forward(li, at, normed, d, mlp_gate_up(li.mlp, F, a.mlp, d.N));
      const RowLinear down[] = {{li.mlp.down, mlp_activation(a.mlp, F, d.N), F}};
      attention_output(li, at, nullptr, x_out, d, down);
    }
    be->add_into(x_out, x_in, nd);
    return aux;
  }
  attention_forward(li, at, normed, d);
  float* h = sized(a.h, nd);
  attention_output(li, at, nullptr, h, d);
  be->add_into(h, x_in, nd);
  norm_forward(li.ffn_norm, h, normed, a.rstd2, d.Nr);
  double aux = 0;
  if (moe) {
    const float* input = gather_rows(normed, D, d, scratch.gathered);
    aux = moe_forward(a.moe, li, input, sized(scratch.ffn_out, d.N * D), d.N);
    reduce_rows({}, scratch.ffn_out.data(), x_out, D, d);
  } else {
    mlp_forward(li.mlp, F, a.mlp, normed, x_out, d, MlpRows::kExchanged);
  }
  be->add_into(x_out, h, nd);
  return aux;
}

// dres: (Nr, D) holds d(objective)/d(block output) and is turned, in place, into the gradient
// with respect to the block input. Normed inputs are recomputed from the saved rstd inputs
// (and gathered again under SP, so only the (Nr, D) shard is kept); under recomputation the
// layer's forward runs again first (full), or its attention internals (selective).
void Transformer::Impl::layer_backward(size_t l, float* dres, float aux_grad, const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D, F = tp.d_ff;
  const int64_t qd = tp.heads * head_dim(), kvd = tp.kv_heads * head_dim();
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
    norm_forward(li.ffn_norm, a.h.data(), normed, a.rstd2, d.Nr);
    const float* input = gather_rows(normed, D, d, s.gathered);
    if (moe) {
      const float* dout = gather_rows(dres, D, d, s.dgathered);
      float* dinput = zeroed(s.residual_partial, d.N * D);
      moe_backward(a.moe, li, input, dout, dinput, aux_grad, d.N);
      reduce_rows({}, dinput, dnormed, D, d);
    } else {
      const float* dout =
          gather_rows(dres, D, d, s.dgathered,
                      {input_grad_gemm(nullptr, w(li.mlp.down), F, D, zeroed(s.dact, d.N * F))});
      dense_ffn_backward(a.mlp, li, input, dout, d);
      reduce_rows({input_grad_gemm(s.dgate.data(), w(li.mlp.gate), D, F, nullptr),
                   input_grad_gemm(s.dup.data(), w(li.mlp.up), D, F, nullptr)},
                  nullptr, dnormed, D, d);
    }
    norm_backward(li.ffn_norm, a.h.data(), a.rstd2, dnormed, dres, d.Nr);
  }
  norm_forward(li.attn_norm, pass.acts[l].x.data(), normed, a.rstd1, d.Nr);
  const bool selective = recompute == config::Recompute::kSelective;
  const float* input = selective ? attention_forward(li, at, normed, d)
                                 : gather_rows(normed, D, d, s.gathered);
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
                nullptr, dnormed, D, d);
  } else {
    reduce_rows({dq_x, dk_x, dv_x}, ffn_dinput, dnormed, D, d);
  }
  norm_backward(li.attn_norm, pass.acts[l].x.data(), a.rstd1, dnormed, dres, d.Nr);
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
    be->copy(x_in, sized(pass.acts[0].x, nd), nd);
  }
  double aux = 0;
  for (size_t l = 0; l < layers.size(); ++l) {
    float* x_out = l + 1 < layers.size() ? sized(pass.acts[l + 1].x, nd) : sized(pass.final_x, nd);
    aux += layer_forward(l, pass.acts[l].x.data(), x_out, d);
  }
  if (!chunk.last) return aux;
  PassActs& p = pass;
  p.final_input = output_forward(p.final_x.data(), d, p.final_normed, p.final_rstd,
                                 p.final_gathered, sized(p.logits, d.N * tp.vocab_rows));
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
    output_backward(dres, d);
    if (notify && lm_head != embed) hooks->on_grad_ready(lm_head);
    if (notify) hooks->on_grad_ready(final_norm);
    if (hooks != nullptr && hooks->poll) hooks->poll();
  } else {
    be->copy(dout, dres, nd);
  }
  for (size_t l = layers.size(); l-- > 0;) {
    layer_backward(l, dres, p.aux_grad, d);
    notify_layer(l, hooks);
  }
  if (chunk.first) {
    embed_backward(p.inputs.data(), dres, d);
    if (notify) hooks->on_grad_ready(embed);
  } else {
    be->copy(dres, din, nd);
  }
}

}  // namespace ms::model
