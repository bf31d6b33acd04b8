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

#include "model/buffers.h"
#include "model/model_impl.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "parallel/tp_overlap.h"
#include "parallel/vocab_parallel.h"

namespace ms::model {
namespace {

// gemm applied to `rows` rows whose input starts at x (row stride: its input width), writing
// or accumulating into y (row stride: its output width).
void apply_gemm(ops::Backend& be, const RowGemm& g, const float* x, float* y, int64_t rows,
                bool accumulate, std::vector<float>& tmp) {
  if (g.input_grad) {
    if (!accumulate) std::memset(y, 0, sizeof(float) * static_cast<size_t>(rows * g.in));
    be.linear_backward(nullptr, g.w, x, y, nullptr, rows, g.in, g.out);
    return;
  }
  if (!accumulate) {
    be.linear_forward(x, g.w, y, rows, g.in, g.out);
    return;
  }
  float* t = sized(tmp, rows * g.out);
  be.linear_forward(x, g.w, t, rows, g.in, g.out);
  be.add_into(y, t, rows * g.out);
}

int64_t input_width(const RowGemm& g) { return g.input_grad ? g.out : g.in; }
int64_t output_width(const RowGemm& g) { return g.input_grad ? g.in : g.out; }

// dst (rows, width) = addend rows + the sum of every gemm over rows [r0, r0 + rows).
void produce(ops::Backend& be, std::initializer_list<RowGemm> gemms, const float* addend,
             int64_t width, int64_t r0, int64_t rows, float* dst, std::vector<float>& tmp) {
  bool written = false;
  if (addend != nullptr) {
    std::memmove(dst, addend + r0 * width, sizeof(float) * static_cast<size_t>(rows * width));
    written = true;
  }
  for (const RowGemm& g : gemms) {
    apply_gemm(be, g, g.x + r0 * input_width(g), dst, rows, written, tmp);
    written = true;
  }
  if (!written) std::memset(dst, 0, sizeof(float) * static_cast<size_t>(rows * width));
}

}  // namespace

Status TpState::blocking(const char* op, uint64_t bytes, const std::function<Status()>& run) {
  return parallel::tp_blocking(overlap, op, bytes, run);
}

const float* Transformer::Impl::gather_rows(const float* local, int64_t width, const Dims& d,
                                            std::vector<float>& buf,
                                            std::initializer_list<RowGemm> gemms) {
  const auto run = [&](const float* rows, int64_t r0, int64_t m) {
    for (const RowGemm& g : gemms) {
      apply_gemm(*be, g, rows, g.y + r0 * output_width(g), m, g.input_grad, scratch.tp_tmp);
    }
  };
  if (!tp.sequence_parallel) {
    run(local, 0, d.N);
    return local;
  }
  float* full = sized(buf, d.N * width);
  if (!tp.error.ok()) return full;
  const int64_t nr = d.Nr;
  tp.error = parallel::chunked_allgather(
      *tp.comm, tp.overlap, local, nr, width,
      [&](const float* gathered, int64_t m, int64_t row0) {
        for (int r = 0; r < tp.size; ++r) {
          const int64_t global_row = r * nr + row0;
          const float* block = gathered + r * m * width;
          std::memcpy(full + global_row * width, block,
                      sizeof(float) * static_cast<size_t>(m * width));
          run(block, global_row, m);
        }
      });
  return full;
}

void Transformer::Impl::reduce_rows(std::initializer_list<RowGemm> gemms, const float* addend,
                                    float* out, int64_t width, const Dims& d, bool accumulate) {
  const int64_t n = d.Nr * width;
  // Where the reduced rows land: out itself unless they must be added or would overwrite the
  // addend while it is still being read.
  const bool direct = !accumulate && addend != out;
  float* result = direct ? out : sized(scratch.tp_recv, n);
  if (!tp.active()) {
    produce(*be, gemms, addend, width, 0, d.N, result, scratch.tp_tmp);
  } else if (tp.error.ok() && !tp.sequence_parallel) {
    tp.error = parallel::chunked_allreduce(
        *tp.comm, tp.overlap, d.N, width,
        [&](float* rows, int64_t m, int64_t row0) {
          produce(*be, gemms, addend, width, row0, m, rows, scratch.tp_tmp);
        },
        result);
  } else if (tp.error.ok()) {
    const int64_t nr = d.Nr;
    tp.error = parallel::chunked_reduce_scatter(
        *tp.comm, tp.overlap, nr, width,
        [&](float* rows, int64_t m, int64_t row0) {
          for (int r = 0; r < tp.size; ++r) {
            produce(*be, gemms, addend, width, r * nr + row0, m, rows + r * m * width,
                    scratch.tp_tmp);
          }
        },
        result);
  }
  if (direct) return;
  if (accumulate) {
    be->add_into(out, result, n);
  } else {
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
  be->add_into(g(param), grad.data(), cfg.d_model);
}

void Transformer::Impl::allreduce_tp(float* data, int64_t count) {
  if (!tp.active() || !tp.error.ok()) return;
  tp.error = parallel::tp_allreduce(*tp.comm, tp.overlap, data, count);
}

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
        *tp.comm, tp.vocab, {d.N, D, tp.sequence_parallel}, inputs, w(embed), x);
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
        *tp.comm, tp.vocab, {d.N, D, tp.sequence_parallel}, inputs, dres, g(embed));
  });
}

}  // namespace ms::model
