// Column- and row-parallel linear layers over a tensor-parallel group, Megatron's placement.
// Weights are slices of the global weight as ops/linear.h stores it, (out_features,
// in_features) row-major with y = x W^T:
//   column-parallel: tp rank r holds output features (rows of W) tp_slice(out_features, tp, r),
//                    stored (out_features / tp, in_features);
//   row-parallel:    tp rank r holds input features (columns of W) tp_slice(in_features, tp, r),
//                    stored (out_features, in_features / tp).
// A column-parallel layer followed by a row-parallel one (attention's q/k/v then o, the MLP's
// gate/up then down) needs one reduction in forward and one in backward.
//
// Communication, with n the rows (tokens) of the whole sequence block:
//                         forward                         backward
//   column, no SP   x (n, in) used as is             dx: all-reduce SUM over tp
//   row, no SP      y: all-reduce SUM over tp        dy (n, out) used as is
//   column, SP      x (n/tp, in): all-gather -> n    dx: reduce-scatter -> (n/tp, in)
//   row, SP         y: reduce-scatter -> (n/tp, out) dy (n/tp, out): all-gather -> n
// With sequence parallelism (SP) tp rank r holds rows [r n/tp, (r+1) n/tp) of the activations
// between the layers, so norms and residual adds run on 1/tp of the tokens. The column-parallel
// backward gathers its input again instead of keeping the gathered (n, in) copy from forward, as
// Megatron does, so the activation saved per layer stays (n/tp, in).
//
// Every function here is collective over `tp`: all ranks call it with the same shape. Sizes are
// checked before any communication, so a refused shape is refused by every rank alike and no
// rank is left waiting. Backward passes accumulate (+=) into dx and dw like ops/ (docs/ops.md);
// a null dx skips the input gradient and its collective (every rank passes null alike).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::parallel {

// A tensor-parallel linear layer in global terms.
struct TpLinearShape {
  int64_t rows = 0;          // n: tokens of the whole sequence block, before any SP split
  int64_t in_features = 0;   // of the global weight
  int64_t out_features = 0;  // of the global weight
  bool sequence_parallel = false;
};

// InvalidArgument naming the rule when tp does not divide out_features (column) or in_features
// (row), or, with sequence parallelism, rows; also for negative sizes.
Status check_column_parallel(const TpLinearShape& shape, int tp);
Status check_row_parallel(const TpLinearShape& shape, int tp);

// x: (n, in), or (n/tp, in) with SP; w: (out/tp, in) -> y: (n, out/tp) (overwritten).
Status column_parallel_forward(comm::Communicator& tp, const TpLinearShape& shape, const float* x,
                               const float* w, float* y);

// x, w: as in forward; dy: (n, out/tp). Accumulates dw: (out/tp, in) += dy^T x_gathered and
// dx: (n, in), or (n/tp, in) with SP, += the input gradient summed over tp.
Status column_parallel_backward(comm::Communicator& tp, const TpLinearShape& shape,
                                const float* x, const float* w, const float* dy, float* dx,
                                float* dw);

// x: (n, in/tp); w: (out, in/tp) -> y: (n, out), or (n/tp, out) with SP (overwritten): the sum
// over tp of the partial products.
Status row_parallel_forward(comm::Communicator& tp, const TpLinearShape& shape, const float* x,
                            const float* w, float* y);

// x, w: as in forward; dy: (n, out), or (n/tp, out) with SP. Accumulates dx: (n, in/tp) and
// dw: (out, in/tp); no reduction is needed, each rank's slices are its own.
Status row_parallel_backward(comm::Communicator& tp, const TpLinearShape& shape, const float* x,
                             const float* w, const float* dy, float* dx, float* dw);

// All-gathers the sequence: rank r's (n/tp, width) block becomes rows [r n/tp, (r+1) n/tp) of
// the returned (n, width). `rows` is n; tp must divide it (the callers check).
Result<std::vector<float>> gather_sequence(comm::Communicator& tp, const float* x, int64_t rows,
                                           int64_t width);

// Sums per-rank partial input gradients partial: (n, in) over tp and adds rank r's part to dx:
// all of it, (n, in), without SP; its sequence block, (n/tp, in), with SP (tp must divide n).
// Several column-parallel layers reading the same input (q, k, v; gate, up) accumulate their
// partials into one buffer and call this once: one collective instead of one per layer.
// partial is used as scratch.
Status reduce_column_input_grad(comm::Communicator& tp, bool sequence_parallel,
                                std::vector<float>& partial, float* dx);

}  // namespace ms::parallel
