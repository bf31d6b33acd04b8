// The SwiGLU feed-forward, y = down(silu(gate(x)) * up(x)), written once for every path that
// runs it whole on one rank's rows: the dense FFN of cached (serving) passes, the MoE shared
// expert in training and serving, and (experts_forward, model/compute.cc) each routed expert.
// Its linear layers go through linear()/linears(): the f32 weights, or, inside a serving pass,
// the CachedLinear hook that answers for quantized weights; a training pass never asks the
// hook, so there the arithmetic is the f32 GEMMs. The tensor-parallel training layers run the
// same three projections at the edges of their gathers and reductions (model/layers.cc).
#include <array>

#include "model/buffers.h"
#include "model/model_impl.h"
#include "ops/activation.h"
#include "ops/linear.h"

namespace ms::model {

void Transformer::Impl::linear(size_t param, const float* x, float* y, int64_t n, int64_t in,
                               int64_t out) {
  const CachedLinearOut hooked{param, y};
  if (serving && cached_linear_hook && cached_linear_hook({&hooked, 1}, x, n)) return;
  be->linear_forward(x, w(param), y, n, in, out);
}

void Transformer::Impl::linears(std::span<const SameInputLinear> layers, const float* x,
                                int64_t n, int64_t in) {
  constexpr size_t kMaxLayers = 4;
  if (serving && cached_linear_hook && layers.size() <= kMaxLayers) {
    std::array<CachedLinearOut, kMaxLayers> outs;
    bool all_answered = true;
    for (size_t i = 0; all_answered && i < layers.size(); ++i) {
      all_answered = cached_linear_answers[layers[i].param];
      outs[i] = {layers[i].param, layers[i].y};
    }
    if (all_answered && cached_linear_hook({outs.data(), layers.size()}, x, n)) return;
  }
  for (const SameInputLinear& l : layers) linear(l.param, x, l.y, n, in, l.out);
}

// x: (rows, D) -> out: (rows, D) = down(silu(gate(x)) * up(x)), added to out when accumulate.
// acts keeps the gate and up projections for the backward.
void Transformer::Impl::mlp_forward(const MlpIndex& m, int64_t d_ff, MlpActs& acts,
                                    const float* x, float* out, int64_t rows, bool accumulate) {
  const int64_t D = cfg.d_model, F = d_ff;
  float* gate = sized(acts.gate, rows * F);
  float* up = sized(acts.up, rows * F);
  const SameInputLinear gate_up[] = {{m.gate, gate, F}, {m.up, up, F}};
  linears(gate_up, x, rows, D);
  float* act = sized(scratch.act, rows * F);
  be->swiglu_forward(gate, up, act, rows * F);
  if (!accumulate) {
    linear(m.down, act, out, rows, F, D);
    return;
  }
  float* proj = sized(scratch.proj, rows * D);
  linear(m.down, act, proj, rows, F, D);
  be->add_into(out, proj, rows * D);
}

// Accumulates dx: (rows, D) and the three weight gradients from dout: (rows, D). The SwiGLU
// product is recomputed from the kept gate and up projections rather than stored.
void Transformer::Impl::mlp_backward(const MlpIndex& m, int64_t d_ff, const MlpActs& acts,
                                     const float* x, const float* dout, float* dx, int64_t rows) {
  const int64_t D = cfg.d_model;
  Scratch& s = scratch;
  float* act = sized(s.act, rows * d_ff);
  be->swiglu_forward(acts.gate.data(), acts.up.data(), act, rows * d_ff);
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

}  // namespace ms::model
