// The embedding and the output layer (final norm and lm_head), for training and serving: the
// token lookup and its gradient, vocabulary-parallel under tp (each rank holds a slice of the
// rows, parallel/vocab_parallel.h), and the logits over this rank's vocabulary rows with their
// backward. The cross-entropy over the logits is the Transformer's loss (transformer.cc).
#include "model/model_impl.h"
#include "parallel/vocab_parallel.h"

namespace ms::model {

void Transformer::Impl::embed_forward(const int32_t* inputs, const Dims& d) {
  const int64_t D = cfg.d_model;
  float* x = sized(pass.acts[0].x, d.Nr * D);
  if (!tp.active()) {
    be->embedding_forward(inputs, w(embed), x, d.N, D);
    return;
  }
  if (!tp.error.ok()) return;
  const char* op = tp.sequence_parallel ? "reduce_scatter" : "allreduce";
  tp.error = tp.blocking(op, static_cast<uint64_t>(d.N * D) * sizeof(float), [&] {
    return parallel::vocab_parallel_embedding_forward(
        *tp.comm, tp.vocab, {d.N, D, tp.sequence_parallel}, inputs, w(embed), x, *be);
  });
}

void Transformer::Impl::embed_backward(const int32_t* inputs, const float* dres, const Dims& d) {
  const int64_t D = cfg.d_model;
  if (!tp.active()) {
    be->embedding_backward(inputs, dres, g(embed), d.N, D);
    return;
  }
  if (!tp.error.ok()) return;
  tp.error = tp.blocking("allgather", static_cast<uint64_t>(d.N * D) * sizeof(float), [&] {
    return parallel::vocab_parallel_embedding_backward(
        *tp.comm, tp.vocab, {d.N, D, tp.sequence_parallel}, inputs, dres, g(embed), *be);
  });
}

const float* Transformer::Impl::output_forward(const float* x, const Dims& d,
                                               Floats& normed,
                                               Floats& rstd,
                                               Floats& gathered, float* logits) {
  norm_forward(final_norm, x, sized(normed, d.Nr * cfg.d_model), rstd, d.Nr);
  const SameInputLinear head[] = {{lm_head, logits, tp.vocab_rows}};
  return project_in(normed.data(), d, gathered,
                    std::span(head, tp.vocab_rows > 0 ? 1 : 0));
}

void Transformer::Impl::output_backward(float* dres, const Dims& d) {
  const int64_t D = cfg.d_model, nd = d.Nr * D;
  PassActs& p = pass;
  be->fill(dres, nd, 0.0f);
  float* dnormed = sized(scratch.dnormed, nd);
  if (tp.vocab_rows > 0) {
    weight_grad(lm_head, p.final_input, p.logits.data(), d.N, D, tp.vocab_rows);
    reduce_rows({parallel::input_grad_gemm(p.logits.data(), w(lm_head), D, tp.vocab_rows,
                                           nullptr)},
                nullptr, dnormed, D, d);
  } else {
    reduce_rows({}, nullptr, dnormed, D, d);
  }
  norm_backward(final_norm, p.final_x.data(), p.final_rstd, dnormed, dres, d.Nr);
}

}  // namespace ms::model
