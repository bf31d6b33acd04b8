// RMSNorm as the model runs it: the pre-attention, pre-FFN and final norms of training and
// serving passes. Under sequence parallelism each tp rank normalizes only its rows, so the
// weight's gradient of a micro-batch is summed over tp before it joins the parameter's.
#include "model/model_impl.h"

namespace ms::model {

void Transformer::Impl::norm_forward(size_t param, const float* x, float* out,
                                     Floats& rstd, int64_t rows) {
  be->rmsnorm_forward(x, w(param), out, sized(rstd, rows), rows, cfg.d_model,
                      static_cast<float>(cfg.norm_eps));
}

void Transformer::Impl::norm_backward(size_t param, const float* x,
                                      const Floats& rstd, const float* dout,
                                      float* dx, int64_t rows) {
  const int64_t D = cfg.d_model;
  if (!tp.sequence_parallel) {
    be->rmsnorm_backward(x, w(param), rstd.data(), dout, dx, g(param), rows, D);
    return;
  }
  float* grad = zeroed(scratch.norm_grad, D);
  be->rmsnorm_backward(x, w(param), rstd.data(), dout, dx, grad, rows, D);
  tp.allreduce(grad, D);
  be->add_into(g(param), grad, D);
}

}  // namespace ms::model
