// Tensor parallelism's row exchanges with their edge GEMMs (parallel/tp_rows.h).
#include "parallel/tp_rows.h"


namespace ms::parallel {
namespace {

float* sized(ops::Backend& be, ops::DeviceArray& v, int64_t n) {
  return v.resize(be, static_cast<size_t>(n));
}

// gemm applied to `rows` rows whose input starts at x (row stride: its input width), writing
// or accumulating into y (row stride: its output width).
void apply_gemm(ops::Backend& be, const RowGemm& g, const float* x, float* y, int64_t rows,
                bool accumulate, ops::DeviceArray& tmp) {
  if (g.input_grad) {
    if (!accumulate) be.fill(y, rows * g.in, 0.0f);
    be.linear_backward(nullptr, g.w, x, y, nullptr, rows, g.in, g.out);
    return;
  }
  if (!accumulate) {
    be.linear_forward(x, g.w, y, rows, g.in, g.out);
    return;
  }
  float* t = sized(be, tmp, rows * g.out);
  be.linear_forward(x, g.w, t, rows, g.in, g.out);
  be.add_into(y, t, rows * g.out);
}

int64_t input_width(const RowGemm& g) { return g.input_grad ? g.out : g.in; }
int64_t output_width(const RowGemm& g) { return g.input_grad ? g.in : g.out; }

// dst (rows, width) = addend rows + the sum of every gemm over rows [r0, r0 + rows).
void produce(ops::Backend& be, std::span<const RowGemm> gemms, const float* addend,
             int64_t width, int64_t r0, int64_t rows, float* dst, ops::DeviceArray& tmp) {
  bool written = false;
  if (addend != nullptr) {
    be.copy(addend + r0 * width, dst, rows * width);
    written = true;
  }
  for (const RowGemm& g : gemms) {
    apply_gemm(be, g, g.x + r0 * input_width(g), dst, rows, written, tmp);
    written = true;
  }
  if (!written) be.fill(dst, rows * width, 0.0f);
}

}  // namespace

Status TpGroup::blocking(const char* op, uint64_t bytes, const std::function<Status()>& run) {
  return tp_blocking(overlap, op, bytes, run);
}

const float* TpGroup::gather_rows(ops::Backend& be, const float* local, int64_t width,
                                  int64_t rows, ops::DeviceArray& buf,
                                  std::span<const RowGemm> gemms) {
  const auto run = [&](const float* x, int64_t r0, int64_t m) {
    for (const RowGemm& g : gemms) {
      apply_gemm(be, g, x, g.y + r0 * output_width(g), m, g.input_grad, tmp_);
    }
  };
  if (!sequence_parallel) {
    run(local, 0, rows);
    return local;
  }
  float* full = sized(be, buf, rows * width);
  if (!error.ok()) return full;
  const int64_t nr = rows / size;
  error = chunked_allgather(
      *comm, overlap, local, nr, width, [&](const float* gathered, int64_t m, int64_t row0) {
        for (int r = 0; r < size; ++r) {
          const int64_t global_row = r * nr + row0;
          const float* block = gathered + r * m * width;
          be.copy(block, full + global_row * width, m * width);
          run(block, global_row, m);
        }
      });
  return full;
}

void TpGroup::reduce_rows(ops::Backend& be, std::span<const RowGemm> gemms,
                          const float* addend, float* out, int64_t width, int64_t rows,
                          bool accumulate) {
  const int64_t nr = sequence_parallel ? rows / size : rows;
  const int64_t n = nr * width;
  // Where the reduced rows land: out itself unless they must be added or would overwrite the
  // addend while it is still being read.
  const bool direct = !accumulate && addend != out;
  float* result = direct ? out : sized(be, recv_, n);
  if (!active()) {
    produce(be, gemms, addend, width, 0, rows, result, tmp_);
  } else if (error.ok() && !sequence_parallel) {
    error = chunked_allreduce(
        *comm, overlap, rows, width,
        [&](float* chunk, int64_t m, int64_t row0) {
          produce(be, gemms, addend, width, row0, m, chunk, tmp_);
        },
        result);
  } else if (error.ok()) {
    error = chunked_reduce_scatter(
        *comm, overlap, nr, width,
        [&](float* chunk, int64_t m, int64_t row0) {
          for (int r = 0; r < size; ++r) {
            produce(be, gemms, addend, width, r * nr + row0, m, chunk + r * m * width, tmp_);
          }
        },
        result);
  }
  if (direct) return;
  if (accumulate) {
    be.add_into(out, result, n);
  } else {
    be.copy(result, out, n);
  }
}

void TpGroup::allreduce(float* data, int64_t count) {
  if (!active() || !error.ok()) return;
  error = tp_allreduce(*comm, overlap, data, count);
}

}  // namespace ms::parallel
