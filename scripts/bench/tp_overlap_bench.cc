// tp_overlap_bench: how much of the tensor-parallel communication the chunked primitives of
// lib/parallel/tp_overlap.h hide behind the GEMMs, on a GEMM-bound shape. The world is one tp
// group; n rows (tokens) of width d, each GEMM (rows, d) x (d, d) as ops::linear_forward:
//   allgather       column-parallel linear under SP: (n/tp, d) gathered chunk by chunk, each
//                   gathered chunk (tp m, d) times the rank's (d, d) weight slice
//   reduce_scatter  row-parallel linear under SP: each chunk's (tp m, d) partial products of
//                   the rank's (n, d) input columns, reduce-scattered to (n/tp, d)
//   allreduce       row-parallel linear without SP: (m, d) rows of the partial product at a
//                   time, all-reduced in place
// For each op and chunk count: the median over calls of the slowest rank's time (a barrier
// before each call; all variants of an op take turns call by call), and per call the
// communication active time (first issue to last completion), the exposed time (caller inside
// issue/test/wait) and the hidden fraction (1 - exposed / active), averaged over ranks;
// "bitwise" says whether the output equals the chunks = 1 output bit for bit. Two
// yardsticks per op: the unchunked call's callback with no communication ("gemm"), and the one
// unchunked collective with callbacks that compute nothing ("comm"); perfect overlap would
// approach max(gemm, comm), no overlap gemm + comm. "saved" is gemm + comm - call: the time
// overlap really won, which the hidden fraction (the share of the collective's lifetime the
// caller was not blocked in, whether or not bytes moved) bounds.
// --poll-slices S splits each callback's GEMM into S row slices with tp_overlap_poll() between
// them, so OpenMPI can move the chunk in flight during the GEMM (1: no polling inside).
// Rank 0 prints a markdown table (docs/bench/tp-overlap.md).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/philox.h"
#include "core/timer.h"
#include "ops/linear.h"
#include "parallel/tp_overlap.h"

namespace {

using namespace ms;
using parallel::CommStats;
using parallel::TpOverlap;

struct Args {
  int64_t rows = 2048;
  int64_t width = 512;
  int iters = 20;
  int warmup = 3;
  std::vector<int> chunks = {1, 2, 4, 8};
  int poll_slices = 1;
};

// y (rows, d) = x (rows, d) w^T for w (d, d), in `slices` row slices with a poll of the
// collectives in flight between them. A failed poll is returned by the chunked call itself.
void sliced_gemm(const float* x, const float* w, float* y, int64_t rows, int64_t d, int slices) {
  const int count = parallel::tp_chunk_count(slices, rows);
  for (int s = 0; s < count; ++s) {
    const parallel::TpChunk k = parallel::tp_chunk(rows, count, s);
    if (s > 0) (void)parallel::tp_overlap_poll();
    ops::linear_forward(x + k.row0 * d, w, y + k.row0 * d, k.rows, d, d);
  }
}

// One op's inputs, its callback and its call, with the GEMMs and the collective switchable for
// the yardsticks.
struct Bench {
  comm::Communicator& tp;
  int64_t n, d, n_local;
  int slices;
  bool gemm = true;  // false: the callbacks compute nothing (the collective alone)
  std::vector<float> x_local, x_cols, w, out, scratch;

  Bench(comm::Communicator& group, const Args& a)
      : tp(group), n(a.rows), d(a.width), n_local(a.rows / group.size()), slices(a.poll_slices) {
    x_local.resize(n_local * d);
    x_cols.resize(n * d);
    w.resize(d * d);
    scratch.resize(n * d);
    const uint64_t rank = static_cast<uint64_t>(tp.rank());
    fill_uniform(x_local, 7, stream_id("x_local") + rank, 0, -1.0f, 1.0f);
    fill_uniform(x_cols, 7, stream_id("x_cols") + rank, 0, -1.0f, 1.0f);
    fill_uniform(w, 7, stream_id("w") + rank, 0, -1.0f, 1.0f);
  }

  // Column-parallel: the gathered chunk (tp m, d) times w, its rows placed in out (n, d).
  void consume(const float* gathered, int64_t m, int64_t row0) {
    if (!gemm) return;
    const int64_t p = tp.size();
    std::vector<float> y(p * m * d);
    sliced_gemm(gathered, w.data(), y.data(), p * m, d, slices);
    for (int64_t r = 0; r < p; ++r) {
      std::memcpy(out.data() + (r * n_local + row0) * d, y.data() + r * m * d,
                  m * d * sizeof(float));
    }
  }

  // Row-parallel under SP: the chunk's (tp m, d) partial products.
  void produce_blocks(float* partial, int64_t m, int64_t row0) {
    if (!gemm) return;
    const int p = tp.size();
    for (int r = 0; r < p; ++r) {
      sliced_gemm(x_cols.data() + (r * n_local + row0) * d, w.data(), partial + r * m * d, m, d,
                  std::max(1, slices / p));
    }
  }

  // Row-parallel without SP: rows [row0, +m) of the partial product.
  void produce_rows(float* rows, int64_t m, int64_t row0) {
    if (gemm) sliced_gemm(x_cols.data() + row0 * d, w.data(), rows, m, d, slices);
  }

  Status call(const std::string& op, const TpOverlap& overlap) {
    using namespace std::placeholders;
    if (op == "allgather") {
      out.resize(n * d);
      return parallel::chunked_allgather(tp, overlap, x_local.data(), n_local, d,
                                         std::bind(&Bench::consume, this, _1, _2, _3));
    }
    if (op == "reduce_scatter") {
      out.resize(n_local * d);
      return parallel::chunked_reduce_scatter(
          tp, overlap, n_local, d, std::bind(&Bench::produce_blocks, this, _1, _2, _3),
          out.data());
    }
    out.resize(n * d);
    return parallel::chunked_allreduce(tp, overlap, n, d,
                                       std::bind(&Bench::produce_rows, this, _1, _2, _3),
                                       out.data());
  }

  // The callback of one unchunked call with no communication: the same GEMMs and copies.
  void gemm_only(const std::string& op) {
    if (op == "allgather") {
      out.resize(n * d);
      consume(scratch.data(), n_local, 0);
    } else if (op == "reduce_scatter") {
      produce_blocks(scratch.data(), n_local, 0);
    } else {
      produce_rows(scratch.data(), n, 0);
    }
  }
};

// Timings travel as f32 (the comm layer has no f64): ample for milliseconds.
double slowest(comm::Communicator& tp, double s) {
  float mine = static_cast<float>(s), max_s = 0;
  (void)tp.allreduce(&mine, &max_s, 1, DType::kF32, comm::ReduceOp::kMax);
  return max_s;
}

double mean_over_ranks(comm::Communicator& tp, double v) {
  float mine = static_cast<float>(v), sum = 0;
  (void)tp.allreduce(&mine, &sum, 1, DType::kF32, comm::ReduceOp::kSum);
  return sum / tp.size();
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The slowest rank's seconds for one work(), a barrier first.
template <typename Work>
Result<double> time_call(comm::Communicator& tp, Work work) {
  MS_RETURN_IF_ERROR(tp.barrier());
  Stopwatch watch;
  MS_RETURN_IF_ERROR(work());
  return slowest(tp, watch.elapsed_s());
}

// Variant 0 is the GEMMs alone, 1 the unchunked collective alone, 2 + i chunks[i]. The variants
// take turns call by call, so the load of the shared 2-core machine slows them alike, and each
// reports its median call.
Status run_op(Bench& b, const Args& a, const std::string& op) {
  comm::Communicator& tp = b.tp;
  const size_t variants = 2 + a.chunks.size();
  std::vector<std::vector<double>> times(variants);
  std::vector<CommStats> stats(a.chunks.size());
  std::vector<std::vector<float>> outputs(a.chunks.size());
  const auto run_variant = [&](size_t v, bool timed) -> Status {
    Result<double> t = 0.0;
    if (v == 0) {
      t = time_call(tp, [&] {
        b.gemm_only(op);
        return Status::OK();
      });
    } else if (v == 1) {
      b.gemm = false;
      t = time_call(tp, [&] { return b.call(op, TpOverlap()); });
      b.gemm = true;
    } else {
      TpOverlap overlap;
      overlap.chunks = a.chunks[v - 2];
      overlap.stats = timed ? &stats[v - 2] : nullptr;
      t = time_call(tp, [&] { return b.call(op, overlap); });
      outputs[v - 2] = b.out;
    }
    MS_RETURN_IF_ERROR(t.status());
    if (timed) times[v].push_back(*t);
    return Status::OK();
  };
  for (int i = 0; i < a.warmup + a.iters; ++i) {
    for (size_t v = 0; v < variants; ++v) MS_RETURN_IF_ERROR(run_variant(v, i >= a.warmup));
  }
  const double gemm_s = median(times[0]), comm_s = median(times[1]);
  for (size_t c = 0; c < a.chunks.size(); ++c) {
    const std::vector<float>& reference = outputs.front();
    int same = reference.size() == outputs[c].size() &&
               std::memcmp(reference.data(), outputs[c].data(),
                           reference.size() * sizeof(float)) == 0;
    int all_same = 0;
    MS_RETURN_IF_ERROR(tp.allreduce(&same, &all_same, 1, DType::kI32, comm::ReduceOp::kMin));
    const double call_s = median(times[2 + c]);
    const double active = mean_over_ranks(tp, stats[c].active_s / a.iters);
    const double exposed = mean_over_ranks(tp, stats[c].exposed_s / a.iters);
    const double hidden = mean_over_ranks(tp, stats[c].hidden_fraction());
    if (tp.rank() == 0) {
      std::printf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %s |\n",
                  op.c_str(), a.chunks[c], call_s * 1e3, gemm_s * 1e3, comm_s * 1e3,
                  (gemm_s + comm_s - call_s) * 1e3, active * 1e3, exposed * 1e3, hidden,
                  all_same ? "yes" : "NO");
    }
  }
  return Status::OK();
}

Status run(const Args& a) {
  MS_ASSIGN_OR_RETURN(auto world, comm::MpiCommunicator::world("tp"));
  if (a.rows % world->size() != 0) {
    return InvalidArgument("--rows (" + std::to_string(a.rows) + ") must be a multiple of the " +
                           std::to_string(world->size()) + " ranks");
  }
  Bench bench(*world, a);
  if (world->rank() == 0) {
    std::printf("# tp %d, n %lld rows, width %lld, GEMM (rows, %lld) x (%lld, %lld), %d calls "
                "after %d warm-up, %d poll slices per GEMM\n",
                world->size(), static_cast<long long>(a.rows), static_cast<long long>(a.width),
                static_cast<long long>(a.width), static_cast<long long>(a.width),
                static_cast<long long>(a.width), a.iters, a.warmup, a.poll_slices);
    std::printf("| op | chunks | call ms | gemm only ms | comm only ms | saved ms | "
                "comm active ms | exposed ms | hidden | bitwise vs first |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  }
  for (const char* op : {"allgather", "reduce_scatter", "allreduce"}) {
    MS_RETURN_IF_ERROR(run_op(bench, a, op));
  }
  return Status::OK();
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("tp_overlap_bench: chunked tensor-parallel collectives overlapped with GEMMs");
  app.add_option("--rows", a.rows, "n: rows of the whole activation")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--width", a.width, "d: width, and the GEMM's (d, d) weight")
      ->check(CLI::Range(1, 1 << 14));
  app.add_option("--iters", a.iters, "timed calls per measurement")->check(CLI::Range(1, 10000));
  app.add_option("--warmup", a.warmup, "untimed calls first")->check(CLI::Range(0, 1000));
  app.add_option("--chunks", a.chunks, "chunk counts, the first is the bitwise reference");
  app.add_option("--poll-slices", a.poll_slices, "row slices per GEMM, polled between")
      ->check(CLI::Range(1, 1 << 16));
  CLI11_PARSE(app, argc, argv);
  if (Status s = comm::init(argc, argv); !s.ok()) {
    std::fprintf(stderr, "tp_overlap_bench: error: %s\n", s.to_string().c_str());
    return 1;
  }
  const Status s = run(a);
  if (!s.ok()) std::fprintf(stderr, "tp_overlap_bench: error: %s\n", s.to_string().c_str());
  const Status f = comm::finalize();
  return s.ok() && f.ok() ? 0 : 1;
}
