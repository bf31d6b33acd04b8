// The tensor-parallel communication of the Transformer's forward and backward (model_impl.h's
// TpState): gathering a sequence-parallel activation before a column-parallel group, reducing
// a row-parallel projection's partial sums, the norm weights' gradients under SP, and the
// vocabulary-parallel embedding. Without tp every step is the identity and touches nothing,
// so a single-process model computes exactly what it did before tensor parallelism existed.
//
// A collective that fails records the error in TpState::error and the rest of the pass skips
// its collectives (the results are garbage then and forward_backward returns the error); the
// failure agreement of the tools (cmd/common/mpi_world.cc) makes every rank stop.
#include <cstring>

#include "model/model_impl.h"
#include "ops/embedding.h"
#include "parallel/tp_linear.h"
#include "parallel/vocab_parallel.h"

namespace ms::model {
namespace {

float* sized(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
  return v.data();
}

void add_into(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

const float* Transformer::Impl::gather_rows(const float* local, int64_t width, const Dims& d,
                                            std::vector<float>& buf) {
  if (!tp.sequence_parallel) return local;
  float* full = sized(buf, d.N * width);
  if (tp.error.ok()) {
    tp.error = tp.comm->allgather(local, full, static_cast<size_t>(d.Nr * width), DType::kF32);
  }
  return full;
}

float* Transformer::Impl::partial_rows(float* out, int64_t width, const Dims& d) {
  if (!tp.active()) return out;
  return sized(scratch.partial, d.N * width);
}

void Transformer::Impl::reduce_rows(float* partial, float* out, int64_t width, const Dims& d,
                                    bool accumulate) {
  const int64_t n = d.Nr * width;
  if (!tp.active()) {
    if (accumulate && partial != out) add_into(out, partial, n);
    return;
  }
  float* result = partial;
  if (tp.error.ok() && !tp.sequence_parallel) {
    tp.error = tp.comm->allreduce(partial, partial, static_cast<size_t>(n), DType::kF32,
                                  comm::ReduceOp::kSum);
  } else if (tp.error.ok()) {
    result = sized(scratch.tp_recv, n);
    tp.error = tp.comm->reduce_scatter(partial, result, static_cast<size_t>(n), DType::kF32,
                                       comm::ReduceOp::kSum);
  }
  if (accumulate) {
    add_into(out, result, n);
  } else if (result != out) {
    std::memcpy(out, result, sizeof(float) * static_cast<size_t>(n));
  }
}

float* Transformer::Impl::norm_grad_buffer(size_t param) {
  if (!tp.sequence_parallel) return g(param);
  scratch.norm_grad.assign(static_cast<size_t>(cfg.d_model), 0.0f);
  return scratch.norm_grad.data();
}

void Transformer::Impl::reduce_norm_grad(size_t param, std::vector<float>& grad) {
  if (!tp.sequence_parallel) return;
  allreduce_tp(grad.data(), cfg.d_model);
  add_into(g(param), grad.data(), cfg.d_model);
}

void Transformer::Impl::allreduce_tp(float* data, int64_t count) {
  if (!tp.active() || !tp.error.ok()) return;
  tp.error = tp.comm->allreduce(data, data, static_cast<size_t>(count), DType::kF32,
                                comm::ReduceOp::kSum);
}

void Transformer::Impl::embed_forward(const int32_t* inputs, const Dims& d) {
  const int64_t D = cfg.d_model;
  float* x = sized(acts[0].x, d.Nr * D);
  if (!tp.active()) {
    ops::embedding_forward(inputs, w(embed), x, d.N, D);
    return;
  }
  if (!tp.error.ok()) return;
  tp.error = parallel::vocab_parallel_embedding_forward(
      *tp.comm, tp.vocab, {d.N, D, tp.sequence_parallel}, inputs, w(embed), x);
}

void Transformer::Impl::embed_backward(const int32_t* inputs, const float* dres, const Dims& d) {
  const int64_t D = cfg.d_model;
  if (!tp.active()) {
    ops::embedding_backward(inputs, dres, g(embed), d.N, D);
    return;
  }
  if (!tp.error.ok()) return;
  tp.error = parallel::vocab_parallel_embedding_backward(
      *tp.comm, tp.vocab, {d.N, D, tp.sequence_parallel}, inputs, dres, g(embed));
}

}  // namespace ms::model
