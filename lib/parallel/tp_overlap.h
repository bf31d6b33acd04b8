// Communication overlap for tensor parallelism, as MegaScale does it: the sequence-parallel
// all-gather (before a column-parallel GEMM), the reduce-scatter (after a row-parallel GEMM) and
// the all-reduce (no SP) are split into row chunks, and the collective of one chunk is in flight
// while the caller's GEMM works on another. The primitives are model-agnostic: the caller passes
// the compute as a callback that sees one chunk at a time.
//
// Sequence-parallel layout: tp rank r holds rows [r n/tp, (r+1) n/tp) of an (n, width)
// activation, its block of n_local = n/tp rows. A chunk is the same row range [row0, row0 + m)
// of every rank's block, so the gathered chunk (and the reduce-scatter's partial-sum chunk) is a
// (tp m, width) buffer whose block r holds global rows [r n_local + row0, +m).
//
// Progress: MPI (OpenMPI in particular) moves a nonblocking collective only inside MPI calls,
// so between chunks the primitives call Request::test() on what is in flight; while a callback
// computes, nothing moves unless the transport progresses by itself (NCCL, or an MPI with a
// progress thread) or the callback calls tp_overlap_poll() between slices of its work. Results
// do not depend on the chunking for the all-gather; for the reductions they do not as long as
// the transport sums each element over the ranks in an order that does not depend on the
// message length (docs/parallel.md, "Communication overlap").
//
// Every function here is collective over `tp`: all ranks call it with the same sizes and chunk
// count. Sizes are checked before any communication, so a refused call is refused by every rank
// alike. The callbacks run on the calling thread, once per chunk, in chunk order.
#pragma once

#include <cstdint>
#include <functional>

#include "comm/communicator.h"
#include "core/status.h"
#include "ops/backend.h"
#include "parallel/comm_stats.h"

namespace ms::parallel {

// How a primitive splits its collective. chunks = 1 is one collective, waited for before (or
// right after) the compute: no overlap, the reference the chunked runs are compared with.
struct TpOverlap {
  int chunks = 1;                  // at least 1 (less is refused); clamped to the rows
  CommStats* stats = nullptr;      // added to after each call when set
  // Called once per collective when its completion is observed: op is "allgather",
  // "reduce_scatter" or "allreduce", bytes as in CommStats, t0 its issue and t1 its observed
  // completion in seconds since the Unix epoch (the trace clock).
  std::function<void(const char* op, uint64_t bytes, double t0, double t1)> on_comm;
  // The device the callers' rows live on: the chunk buffers are allocated there (the
  // backend's allocator) so the transport moves device memory end to end.
  ops::Backend* backend = &ops::cpu_backend();
};

// gathered: (tp m, width), block r = global rows [r n_local + row0, +m). Valid only during the
// call.
using TpGatherConsumer =
    std::function<void(const float* gathered, int64_t rows_per_rank, int64_t row0)>;
// Fills `rows` with the chunk's data, a (tp m, width) buffer for the reduce-scatter (block r:
// the partial sums for global rows [r n_local + row0, +m)) or (m, width) for the all-reduce
// (rows [row0, +m) of y). The buffer's earlier content is unspecified: overwrite all of it.
using TpChunkProducer = std::function<void(float* rows, int64_t rows_per_rank, int64_t row0)>;

// x_local: (n_local, width), this rank's block. Splits the block into `chunks` contiguous row
// ranges (sizes differing by at most one, the larger first) and calls consume once per chunk
// with the chunk gathered from every rank; the gather of chunk c+1 is in flight while consume
// works on chunk c. n_local = 0 communicates nothing and never calls consume.
Status chunked_allgather(comm::Communicator& tp, const TpOverlap& overlap, const float* x_local,
                         int64_t n_local, int64_t width, const TpGatherConsumer& consume);

// y_local: (n_local, width), overwritten with this rank's block of the sum over tp of the
// partial sums `produce` writes, chunk by chunk: the reduce-scatter (SUM) of chunk c into rows
// [row0, row0 + m) of y_local is in flight while produce computes chunk c+1.
Status chunked_reduce_scatter(comm::Communicator& tp, const TpOverlap& overlap, int64_t n_local,
                              int64_t width, const TpChunkProducer& produce, float* y_local);

// y: (n, width). produce writes rows [row0, row0 + m) of y (it is handed a pointer to row
// row0), which are then all-reduced (SUM) in place while produce computes the next chunk.
// produce must not touch other rows of y: earlier chunks may still be in flight.
Status chunked_allreduce(comm::Communicator& tp, const TpOverlap& overlap, int64_t n,
                         int64_t width, const TpChunkProducer& produce, float* y);

// A blocking tp collective, or an op made of them (a vocabulary-parallel operator), run by
// `run` and counted like one collective of `op` ("allgather", "reduce_scatter", "allreduce")
// and `bytes`: added to overlap.stats as fully exposed (active_s = exposed_s = its time) and
// reported to overlap.on_comm. Returns run's status.
Status tp_blocking(const TpOverlap& overlap, const char* op, uint64_t bytes,
                   const std::function<Status()>& run);

// data: `count` floats, replaced by their sum over tp (a blocking all-reduce, counted as
// tp_blocking counts an "allreduce" of count floats).
Status tp_allreduce(comm::Communicator& tp, const TpOverlap& overlap, float* data,
                    int64_t count);

// Lets the collectives in flight in the chunked call running on this thread progress (a
// Request::test() on each); meant to be called from inside a consume or produce callback,
// between slices of its GEMM. Outside a callback it does nothing and returns OK. A failure is
// returned here and also by the chunked call once the callback returns.
Status tp_overlap_poll();

// How the primitives split `rows` (pure). tp_chunk_count: the requested chunks clamped to
// [1, rows], and 0 when rows is 0. tp_chunk: chunk c of `rows` split into `chunks` (a count
// tp_chunk_count returned) contiguous pieces whose sizes differ by at most one, the larger first.
struct TpChunk {
  int64_t row0 = 0;
  int64_t rows = 0;
};
int tp_chunk_count(int chunks, int64_t rows);
TpChunk tp_chunk(int64_t rows, int chunks, int c);

}  // namespace ms::parallel
