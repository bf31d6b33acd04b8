// The model's linear layers, written once for every path: a projection through the f32 weight
// or, inside a serving pass, the CachedLinear hook that answers for quantized weights (a
// training pass never asks the hook, so there the arithmetic is the f32 GEMMs); the column- and
// row-parallel groups, whose projections meet the tp group's row exchanges
// (parallel/tp_rows.h) and are the plain projections without tp; and the weight gradients,
// applied at once or deferred for the zero-bubble schedule's W pass.
#include <array>

#include "model/model_impl.h"

namespace ms::model {

void Transformer::Impl::linear(size_t param, const float* x, float* y, int64_t n, int64_t in,
                               int64_t out) {
  const CachedLinearOut hooked{param, y};
  if (serving && cached_linear_hook && cached_linear_hook(*be, {&hooked, 1}, x, n)) return;
  be->linear_forward(x, w(param), y, n, in, out);
}

void Transformer::Impl::linears(std::span<const SameInputLinear> layers, const float* x,
                                int64_t n, int64_t in) {
  constexpr size_t kMaxLayers = 5;
  if (serving && cached_linear_hook && layers.size() <= kMaxLayers) {
    std::array<CachedLinearOut, kMaxLayers> outs;
    bool all_answered = true;
    for (size_t i = 0; all_answered && i < layers.size(); ++i) {
      all_answered = cached_linear_answers[layers[i].param];
      outs[i] = {layers[i].param, layers[i].y};
    }
    if (all_answered && cached_linear_hook(*be, {outs.data(), layers.size()}, x, n)) return;
  }
  for (const SameInputLinear& l : layers) linear(l.param, x, l.y, n, in, l.out);
}

const float* Transformer::Impl::project_in(const float* local, const Dims& d,
                                           Floats& buf,
                                           std::span<const SameInputLinear> outs) {
  const int64_t D = cfg.d_model;
  if (!tp.active()) {
    linears(outs, local, d.N, D);
    return local;
  }
  constexpr size_t kMaxGemms = 5;  // q, k, v and the parallel block's gate and up
  std::array<RowGemm, kMaxGemms> gemms;
  for (size_t i = 0; i < outs.size(); ++i) {
    gemms[i] = parallel::forward_gemm(nullptr, w(outs[i].param), D, outs[i].out, outs[i].y);
  }
  return tp.gather_rows(*be, local, D, d.N, buf, std::span(gemms.data(), outs.size()));
}

void Transformer::Impl::project_out(std::span<const RowLinear> projections, const float* addend,
                                    float* out, const Dims& d) {
  const int64_t D = cfg.d_model;
  if (tp.active()) {
    constexpr size_t kMaxGemms = 2;  // o and the parallel block's down
    std::array<RowGemm, kMaxGemms> gemms;
    for (size_t i = 0; i < projections.size(); ++i) {
      const RowLinear& p = projections[i];
      gemms[i] = parallel::forward_gemm(p.x, w(p.param), p.in, D, nullptr);
    }
    tp.reduce_rows(*be, std::span(gemms.data(), projections.size()), addend, out, D, d.N,
                   false);
    return;
  }
  const int64_t n = d.N * D;
  bool written = addend != nullptr;
  if (written && addend != out) be->copy(addend, out, n);
  for (const RowLinear& p : projections) {
    if (!written) {
      linear(p.param, p.x, out, d.N, p.in, D);
      written = true;
      continue;
    }
    float* partial = sized(scratch.proj, n);
    linear(p.param, p.x, partial, d.N, p.in, D);
    be->add_into(out, partial, n);
  }
  if (!written) be->fill(out, n, 0.0f);
}

void Transformer::Impl::weight_grad(size_t param, const float* x, const float* dy, int64_t n,
                                    int64_t in, int64_t out) {
  if (defer_into == nullptr) {
    be->linear_backward(x, nullptr, dy, nullptr, g(param), n, in, out);
    return;
  }
  DeferredGemm& gemm = defer_into->emplace_back();
  gemm.param = param;
  gemm.x.assign(*be, x, static_cast<size_t>(n * in));
  gemm.dy.assign(*be, dy, static_cast<size_t>(n * out));
  gemm.n = n;
  gemm.in = in;
  gemm.out = out;
}

}  // namespace ms::model
