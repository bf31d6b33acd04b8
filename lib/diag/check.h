// The measurements of `ms-diagnose check`: per-rank compute (OpenBLAS sgemm GFLOP/s,
// ops/sgemm_rate.h; the GPU's through gpu_check.h) and memory bandwidth (STREAM triad GB/s,
// core/memory_bandwidth.h), collective benchmarks over a size sweep in the manner of
// nccl-tests, and a pairwise point-to-point bandwidth matrix. health.h turns them into a verdict.
//
// Collectives follow nccl-tests' definitions: "size" is the bytes of the whole operation (for
// allgather, reduce-scatter and alltoall the total over all ranks), algbw = size / time and
// busbw = algbw * factor, the factor making busbw comparable with the link speed (allreduce
// 2(n-1)/n; allgather, reduce-scatter, alltoall (n-1)/n; broadcast and sendrecv 1). Inputs are
// small integers in f32, so every result is exact and each wrong element is counted.
//
// Per-rank benchmarks run one rank at a time while the others wait without spinning, so ranks
// that share cores do not disturb each other's numbers; turns go round-robin several times and
// each rank reports its best, as does each pair of the point-to-point matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "diag/gpu_check.h"
#include "diag/health.h"

namespace ms::diag {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv };
inline constexpr Collective kAllCollectives[] = {
    Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
    Collective::kAllToAll,  Collective::kBroadcast, Collective::kSendRecv};

// "allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "sendrecv".
std::string_view collective_name(Collective c);
Result<Collective> parse_collective(std::string_view name);

// nccl-tests' busbw / algbw for `c` over `ranks` ranks.
double bus_bandwidth_factor(Collective c, int ranks);

// Element counts (f32) of one operation of nccl-tests size `size_bytes`: `count` is the printed
// count (the whole operation's), send/recv the per-rank buffer lengths. Totals of the blocked
// collectives are rounded down to a multiple of `ranks`; `bytes` is the size actually moved.
struct CollectiveShape {
  size_t count = 0;
  size_t send_count = 0;
  size_t recv_count = 0;
  size_t bytes = 0;
};
CollectiveShape collective_shape(Collective c, size_t size_bytes, int ranks);

// min, min*factor, ... up to max (inclusive); each a multiple of 4 bytes. InvalidArgument when
// min is 0, min > max or factor <= 1.
Result<std::vector<size_t>> sweep_sizes(size_t min_bytes, size_t max_bytes, double factor);

// The exact input: element i contributed by rank r, a small integer in [1, 16].
float input_value(int rank, size_t i);
// Rank `rank`'s send buffer (shape.send_count elements) for `c`.
void fill_send_buffer(Collective c, int rank, std::span<float> send);
// What element i of rank `rank`'s receive buffer must hold afterwards (broadcast root is 0).
// `block` is the per-rank block length: the receive length / ranks for allgather and alltoall,
// the receive length for reduce-scatter; other collectives ignore it.
float expected_value(Collective c, int rank, int ranks, size_t block, size_t i);
// Elements of `recv` that differ from expected_value.
uint64_t count_wrong(Collective c, int rank, int ranks, std::span<const float> recv);

// Where the result goes, as in nccl-tests: into a separate receive buffer, or over the input
// (allreduce, reduce-scatter and alltoall on one buffer; allgather with this rank's block
// already in place; broadcast on the receive buffer alone).
enum class Placement { kOutOfPlace, kInPlace };
// False for sendrecv, which MPI cannot run on one buffer (printed "N/A").
bool has_in_place(Collective c);

// The host buffers of one placement, allocated and filled once per placement and size (never
// inside a timed loop). Out of place: `send` holds the input and `recv` (recv_count elements)
// is filled with -7, so an element the collective leaves unwritten counts as wrong. In place:
// `recv` alone (the larger of the two lengths), holding the input where the collective
// expects it (the whole input; for allgather only this rank's block, at its offset).
struct CollectiveBuffers {
  std::vector<float> send, recv;
};
CollectiveBuffers make_collective_buffers(Collective c, Placement p, const CollectiveShape& s,
                                          int rank);

// One placement's timing and verification.
struct PlacementResult {
  bool measured = false;    // false: the collective has no such form (printed N/A)
  double time_us = 0;       // mean per operation, the slowest rank's
  double algbw_gbs = 0;
  double busbw_gbs = 0;
  uint64_t wrong = 0;       // summed over ranks
};

struct CollectiveResult {
  Collective collective = Collective::kAllReduce;
  size_t bytes = 0;
  size_t count = 0;
  int root = -1;  // broadcast's root; -1 otherwise
  PlacementResult out_of_place, in_place;
  uint64_t wrong() const { return out_of_place.wrong + in_place.wrong; }
};

// Test-only fault injection: the named rank's per-rank and point-to-point timings are
// multiplied by `factor`, as if it were that much slower. rank -1 injects nothing.
struct Injection {
  int rank = -1;
  double factor = 1;
};

struct CheckOptions {
  size_t min_bytes = 1024;
  size_t max_bytes = 4u << 20;
  double factor = 4;
  int iters = 10;
  int warmup = 3;
  int sgemm_n = 256;
  size_t triad_elements = 2u << 20;
  int compute_reps = 3;
  // Turns are taken round-robin this many times and each rank keeps its best, so a burst of
  // load from elsewhere on a shared machine hits one sample of a rank rather than all of them;
  // each collective size is timed in this many passes, the best kept, for the same reason.
  int rounds = 3;
  size_t p2p_bytes = 1u << 20;
  int p2p_reps = 5;
  std::vector<Collective> collectives{std::begin(kAllCollectives), std::end(kAllCollectives)};
  Injection injection;
  // The least bus bandwidth (GB/s) each collective must reach at its best size and placement
  // (peak_busbw_gbs); below it, `check` exits 3 as for a wrong result. 0 judges nothing.
  double min_busbw_gbs = 0;
  // Sizes of the GPU probes (gpu_check.h), taken during this rank's turn where the binary has
  // CUDA and the rank sees a GPU; 0 skips a probe.
  GpuProbeSizes gpu;
  // Judge the GPU a rank uses with the NVML rules (gpu_health.h) where it has one and NVML is
  // present: a bad or suspect GPU is a fault of its machine.
  bool gpu_health = true;
};

// Collective over `comm`: one size of one collective, out of place and then in place (where
// it has that form). Each placement runs options.warmup untimed operations, then
// options.rounds passes of options.iters timed ones (the best pass's slowest-rank mean is
// reported), on buffers allocated and filled once outside the timed loops; then it runs once
// more on fresh buffers and is verified.
Result<CollectiveResult> run_collective(comm::Communicator& comm, Collective c, size_t size_bytes,
                                        const CheckOptions& options);


// Bandwidth of every ordered pair (src, dst), measured one pair at a time: src sends a message
// of options.p2p_bytes and waits for dst's one-byte acknowledgement, options.p2p_reps times in
// each of options.rounds passes over all pairs; bandwidth = bytes / the best time.
struct P2pMatrix {
  int ranks = 0;
  std::vector<double> gbs;  // (ranks, ranks), row = src, column = dst; diagonal 0
  double at(int src, int dst) const { return gbs[static_cast<size_t>(src) * ranks + dst]; }
};
Result<P2pMatrix> measure_p2p_matrix(comm::Communicator& comm, const CheckOptions& options);

// Ordered pairs whose bandwidth is a suspect value against all pairs (health.h's rule).
struct SlowLink {
  int src = 0, dst = 0;
  Finding finding;
};
std::vector<SlowLink> find_slow_links(const P2pMatrix& matrix, const HealthOptions& options);

// Everything one check run measured, on every rank.
struct CheckResults {
  std::vector<RankMeasurement> ranks;              // indexed by rank
  std::vector<std::vector<CollectiveResult>> collectives;  // per options.collectives entry
  P2pMatrix p2p;
  // The same sweep over NCCL on GPU buffers (check --nccl, diag/check_nccl.h), one entry per
  // options.collectives entry, or the reason it did not run; both empty without --nccl.
  std::vector<std::vector<CollectiveResult>> nccl_collectives;
  std::string nccl_skipped;
};

// Collective over `comm`: per-rank benchmarks, the collective sweep and the p2p matrix; each
// rank's measurements are gathered on every rank. `host` names this rank's machine.
Result<CheckResults> run_check(comm::Communicator& comm, const std::string& host,
                               const CheckOptions& options);

// Waits for `request` by polling with short sleeps, so a waiting rank leaves its core to a rank
// that is measuring.
Status wait_quietly(comm::Request& request);
// A barrier whose waiting ranks sleep instead of spinning.
Status quiet_barrier(comm::Communicator& comm);

// The best bus bandwidth over `rows` (every size, both placements): the figure a link speed is
// compared with, since small sizes measure latency rather than bandwidth. 0 for no rows.
double peak_busbw_gbs(std::span<const CollectiveResult> rows);

// nccl-tests-style text: '#' header lines, a units row, one row per size with out-of-place
// and in-place columns (time, algbw, busbw, #wrong each; N/A where there is no in-place form),
// and the average busbw over every measured row and placement, as nccl-tests reports it.
std::string format_collective_table(Collective c, int ranks,
                                    std::span<const CollectiveResult> rows);

}  // namespace ms::diag
