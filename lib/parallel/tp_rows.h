// Tensor parallelism's exchanges of activation rows, with the GEMMs at their edges: the
// sequence-parallel all-gather before a column-parallel group, and the all-reduce (or, with
// sequence parallelism, reduce-scatter) of a row-parallel projection's partial sums. The GEMMs
// on either side of a collective are handed to it as RowGemms, so that under
// parallel.tp_overlap it runs them one chunk of rows at a time while the next chunk moves
// (parallel/tp_overlap.h). The model (model/blocks/) says which projections meet at which
// exchange; this file owns how the rows travel.
//
// Without tp (size 1) every exchange is the identity and only the GEMMs run, over all rows, so
// a single-process model computes exactly what it computes without tensor parallelism.
//
// Errors: a collective that fails is kept in `error` and every later one is skipped (the
// results are garbage then, and the pass that owns the group returns the error); the failure
// agreement of the tools (cmd/common/mpi_world.cc) makes every rank stop.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "ops/backend.h"
#include "ops/device_array.h"
#include "parallel/comm_stats.h"
#include "parallel/tp_overlap.h"

namespace ms::parallel {

// One GEMM applied to a range of rows: forward y = x W^T with W (out, in), or an input
// gradient dx += dy W. x null means the rows a gather just delivered.
struct RowGemm {
  const float* x = nullptr;  // (N, in), or (N, out) for an input gradient
  const float* w = nullptr;  // (out, in)
  int64_t in = 0, out = 0;
  bool input_grad = false;
  float* y = nullptr;  // gather only: the destination, (N, out) or (N, in) for an input gradient
};

// y = x W^T over all rows (x null: the gathered rows).
inline RowGemm forward_gemm(const float* x, const float* w, int64_t in, int64_t out, float* y) {
  return RowGemm{x, w, in, out, false, y};
}

// dx += dy W over all rows (dy null: the gathered rows).
inline RowGemm input_grad_gemm(const float* dy, const float* w, int64_t in, int64_t out,
                               float* dx) {
  return RowGemm{dy, w, in, out, true, dx};
}

// This rank's end of a tensor-parallel group (size 1, comm null: no communication is ever
// asked of it). Rows: an (N, width) activation is held whole (N rows) on every rank, or with
// sequence parallelism as this rank's N / size rows.
struct TpGroup {
  comm::Communicator* comm = nullptr;  // null when size = 1
  int size = 1, rank = 0;
  bool sequence_parallel = false;      // only with size > 1
  bool active() const { return size > 1; }
  // The first failed collective; later ones are skipped.
  Status error;
  // Chunking of the overlapped collectives and where their time is counted and traced
  // (overlap.stats points at `stats` once the owner sets it).
  TpOverlap overlap;
  CommStats stats;

  // Runs a blocking tp collective (or an op made of them), counted as fully exposed
  // (tp_blocking into overlap.stats). Skipped after an error.
  Status blocking(const char* op, uint64_t bytes, const std::function<Status()>& run);

  // The (N, width) form of the rows `local` (N / size rows with SP): all-gathered into buf
  // with SP, `local` itself otherwise. Each gemm (x null: the gathered rows) is applied to
  // every row into its y, chunk by chunk as the rows arrive.
  const float* gather_rows(ops::Backend& be, const float* local, int64_t width, int64_t rows,
                           ops::DeviceArray& buf, std::span<const RowGemm> gemms);
  const float* gather_rows(ops::Backend& be, const float* local, int64_t width, int64_t rows,
                           ops::DeviceArray& buf, std::initializer_list<RowGemm> gemms = {}) {
    return gather_rows(be, local, width, rows, buf, std::span(gemms.begin(), gemms.size()));
  }
  // out (this rank's rows, width) =, or += with accumulate, this rank's rows of the sum over
  // tp of addend (N, width; may be null) + every gemm's rows (all-reduce, or reduce-scatter
  // with SP). addend may alias out.
  void reduce_rows(ops::Backend& be, std::span<const RowGemm> gemms, const float* addend,
                   float* out, int64_t width, int64_t rows, bool accumulate);
  void reduce_rows(ops::Backend& be, std::initializer_list<RowGemm> gemms, const float* addend,
                   float* out, int64_t width, int64_t rows, bool accumulate) {
    reduce_rows(be, std::span(gemms.begin(), gemms.size()), addend, out, width, rows,
                accumulate);
  }
  // All-reduce SUM in place (nothing without tp).
  void allreduce(float* data, int64_t count);

 private:
  ops::DeviceArray recv_, tmp_;  // reduced rows before they are added; a gemm's partial rows
};

}  // namespace ms::parallel
