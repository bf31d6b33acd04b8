// Column/row-parallel linear: ops::linear_* on the local slices plus the tp collectives of the
// table in tp_linear.h. Scratch buffers are allocated per call; overlapping them with compute
// (chunked, polled collectives) is issue 12's next step (docs/parallel.md).
#include "parallel/tp_linear.h"

#include <string>
#include <vector>

#include "ops/linear.h"
#include "parallel/tp_layout.h"

namespace ms::parallel {

namespace {

Status check_sizes(const TpLinearShape& s, int tp, bool split_out) {
  if (s.rows < 0 || s.in_features < 1 || s.out_features < 1) {
    return InvalidArgument("tensor-parallel linear needs rows >= 0 and features >= 1, got rows " +
                           std::to_string(s.rows) + ", in " + std::to_string(s.in_features) +
                           ", out " + std::to_string(s.out_features));
  }
  const int64_t split = split_out ? s.out_features : s.in_features;
  MS_RETURN_IF_ERROR(tp_slice(split, tp, 0,
                              split_out ? "out_features (column-parallel)"
                                        : "in_features (row-parallel)").status());
  if (s.sequence_parallel) {
    MS_RETURN_IF_ERROR(tp_slice(s.rows, tp, 0, "the rows (tokens) under sequence parallelism")
                           .status());
  }
  return Status::OK();
}

// dst (count) += src (count).
void add_into(float* dst, const float* src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

}  // namespace

Status check_column_parallel(const TpLinearShape& shape, int tp) {
  return check_sizes(shape, tp, true);
}

Status check_row_parallel(const TpLinearShape& shape, int tp) {
  return check_sizes(shape, tp, false);
}

Status reduce_column_input_grad(comm::Communicator& tp, bool sequence_parallel,
                                std::vector<float>& partial, float* dx) {
  if (!sequence_parallel) {
    MS_RETURN_IF_ERROR(tp.allreduce(partial.data(), partial.data(), partial.size(), DType::kF32,
                                    comm::ReduceOp::kSum));
    add_into(dx, partial.data(), partial.size());
    return Status::OK();
  }
  const size_t block = partial.size() / static_cast<size_t>(tp.size());
  std::vector<float> mine(block);
  MS_RETURN_IF_ERROR(tp.reduce_scatter(partial.data(), mine.data(), block, DType::kF32,
                                       comm::ReduceOp::kSum));
  add_into(dx, mine.data(), block);
  return Status::OK();
}

Result<std::vector<float>> gather_sequence(comm::Communicator& tp, const float* x, int64_t rows,
                                           int64_t width) {
  std::vector<float> full(static_cast<size_t>(rows * width));
  const size_t block = full.size() / static_cast<size_t>(tp.size());
  MS_RETURN_IF_ERROR(tp.allgather(x, full.data(), block, DType::kF32));
  return full;
}

Status column_parallel_forward(comm::Communicator& tp, const TpLinearShape& shape, const float* x,
                               const float* w, float* y) {
  MS_RETURN_IF_ERROR(check_column_parallel(shape, tp.size()));
  const int64_t out_local = shape.out_features / tp.size();
  if (!shape.sequence_parallel) {
    ops::linear_forward(x, w, y, shape.rows, shape.in_features, out_local);
    return Status::OK();
  }
  MS_ASSIGN_OR_RETURN(const std::vector<float> x_full,
                      gather_sequence(tp, x, shape.rows, shape.in_features));
  ops::linear_forward(x_full.data(), w, y, shape.rows, shape.in_features, out_local);
  return Status::OK();
}

Status column_parallel_backward(comm::Communicator& tp, const TpLinearShape& shape,
                                const float* x, const float* w, const float* dy, float* dx,
                                float* dw) {
  MS_RETURN_IF_ERROR(check_column_parallel(shape, tp.size()));
  const int64_t out_local = shape.out_features / tp.size();
  std::vector<float> x_full;
  if (shape.sequence_parallel) {
    MS_ASSIGN_OR_RETURN(x_full, gather_sequence(tp, x, shape.rows, shape.in_features));
  }
  const float* input = shape.sequence_parallel ? x_full.data() : x;
  // The partial input gradient starts from zero: only the reduced sum may reach dx.
  const int64_t dx_size = dx == nullptr ? 0 : shape.rows * shape.in_features;
  std::vector<float> partial(static_cast<size_t>(dx_size));
  ops::linear_backward(input, w, dy, dx == nullptr ? nullptr : partial.data(), dw, shape.rows,
                       shape.in_features, out_local);
  if (dx == nullptr) return Status::OK();
  return reduce_column_input_grad(tp, shape.sequence_parallel, partial, dx);
}

Status row_parallel_forward(comm::Communicator& tp, const TpLinearShape& shape, const float* x,
                            const float* w, float* y) {
  MS_RETURN_IF_ERROR(check_row_parallel(shape, tp.size()));
  const int64_t in_local = shape.in_features / tp.size();
  std::vector<float> partial(static_cast<size_t>(shape.rows * shape.out_features));
  ops::linear_forward(x, w, partial.data(), shape.rows, in_local, shape.out_features);
  if (!shape.sequence_parallel) {
    return tp.allreduce(partial.data(), y, partial.size(), DType::kF32, comm::ReduceOp::kSum);
  }
  return tp.reduce_scatter(partial.data(), y, partial.size() / static_cast<size_t>(tp.size()),
                           DType::kF32, comm::ReduceOp::kSum);
}

Status row_parallel_backward(comm::Communicator& tp, const TpLinearShape& shape, const float* x,
                             const float* w, const float* dy, float* dx, float* dw) {
  MS_RETURN_IF_ERROR(check_row_parallel(shape, tp.size()));
  const int64_t in_local = shape.in_features / tp.size();
  std::vector<float> dy_full;
  if (shape.sequence_parallel) {
    MS_ASSIGN_OR_RETURN(dy_full, gather_sequence(tp, dy, shape.rows, shape.out_features));
  }
  const float* grad = shape.sequence_parallel ? dy_full.data() : dy;
  ops::linear_backward(x, w, grad, dx, dw, shape.rows, in_local, shape.out_features);
  return Status::OK();
}

}  // namespace ms::parallel
