// The SwiGLU feed-forward, y = down(silu(gate(x)) * up(x)), written once for every path that
// runs it: the dense FFN of training layers (a column-parallel gate/up and a row-parallel down
// under tp, through project_in / project_out) and of cached passes, the MoE shared expert in
// training and serving, and each routed expert (experts_forward, model/blocks/moe.cc). The
// parallel block runs the same pieces (mlp_gate_up, mlp_activation and the down projection)
// inside its attention's exchanges (model/layers.cc). Its linear layers go through
// linear()/linears() (model/blocks/linear.cc), so a serving pass may answer them with
// quantized weights.
#include <array>

#include "model/model_impl.h"

namespace ms::model {

std::array<Transformer::Impl::SameInputLinear, 2> Transformer::Impl::mlp_gate_up(
    const MlpIndex& m, int64_t d_ff, MlpActs& acts, int64_t rows) {
  return {{{m.gate, sized(acts.gate, rows * d_ff), d_ff}, {m.up, sized(acts.up, rows * d_ff), d_ff}}};
}

float* Transformer::Impl::mlp_activation(const MlpActs& acts, int64_t d_ff, int64_t rows) {
  float* act = sized(scratch.act, rows * d_ff);
  be->swiglu_forward(acts.gate.data(), acts.up.data(), act, rows * d_ff);
  return act;
}

void Transformer::Impl::mlp_forward(const MlpIndex& m, int64_t d_ff, MlpActs& acts,
                                    const float* x, float* out, const Dims& d, MlpRows rows) {
  const int64_t D = cfg.d_model, F = d_ff;
  const std::array<SameInputLinear, 2> gate_up = mlp_gate_up(m, F, acts, d.N);
  if (rows == MlpRows::kExchanged) {
    project_in(x, d, scratch.gathered, gate_up);
  } else {
    linears(gate_up, x, d.N, D);
  }
  const RowLinear down[] = {{m.down, mlp_activation(acts, F, d.N), F}};
  if (rows == MlpRows::kExchanged) {
    project_out(down, nullptr, out, d);
  } else if (rows == MlpRows::kWhole) {
    linear(m.down, down[0].x, out, d.N, F, D);
  } else {
    float* proj = sized(scratch.proj, d.N * D);
    linear(m.down, down[0].x, proj, d.N, F, D);
    be->add_into(out, proj, d.N * D);
  }
}

void Transformer::Impl::mlp_backward(const MlpIndex& m, int64_t d_ff, const MlpActs& acts,
                                     const float* x, const float* dout, float* dx, int64_t rows) {
  const int64_t D = cfg.d_model;
  Scratch& s = scratch;
  float* act = mlp_activation(acts, d_ff, rows);
  float* dact = zeroed(s.dact, rows * d_ff);
  be->linear_backward(act, w(m.down), dout, dact, nullptr, rows, d_ff, D);
  weight_grad(m.down, act, dout, rows, d_ff, D);
  float* dgate = zeroed(s.dgate, rows * d_ff);
  float* dup = zeroed(s.dup, rows * d_ff);
  be->swiglu_backward(acts.gate.data(), acts.up.data(), dact, dgate, dup, rows * d_ff);
  be->linear_backward(x, w(m.gate), dgate, dx, nullptr, rows, D, d_ff);
  be->linear_backward(x, w(m.up), dup, dx, nullptr, rows, D, d_ff);
  weight_grad(m.gate, x, dgate, rows, D, d_ff);
  weight_grad(m.up, x, dup, rows, D, d_ff);
}

void Transformer::Impl::dense_ffn_backward(MlpActs& acts, const LayerIndex& li,
                                           const float* input, const float* dout,
                                           const Dims& d) {
  const int64_t D = cfg.d_model, F = tp.d_ff;
  Scratch& s = scratch;
  float* act = mlp_activation(acts, F, d.N);
  weight_grad(li.mlp.down, act, dout, d.N, F, D);
  float* dgate = zeroed(s.dgate, d.N * F);
  float* dup = zeroed(s.dup, d.N * F);
  be->swiglu_backward(acts.gate.data(), acts.up.data(), s.dact.data(), dgate, dup, d.N * F);
  weight_grad(li.mlp.gate, input, dgate, d.N, D, F);
  weight_grad(li.mlp.up, input, dup, d.N, D, F);
}

}  // namespace ms::model
