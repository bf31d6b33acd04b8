// Measurements of `ms-diagnose check`; definitions and the one-rank-at-a-time policy are in
// check.h.
#include "diag/check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "comm/variable_length.h"
#include "core/memory_bandwidth.h"
#include "core/timer.h"
#include "diag/gpu_check.h"
#include "ops/sgemm_rate.h"

namespace ms::diag {

namespace {

constexpr int kP2pTag = 7301;

int prev_rank(int rank, int ranks) { return (rank - 1 + ranks) % ranks; }
int next_rank(int rank, int ranks) { return (rank + 1) % ranks; }

}  // namespace

std::string_view collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "allreduce";
    case Collective::kAllGather: return "allgather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "sendrecv";
  }
  return "?";
}

Result<Collective> parse_collective(std::string_view name) {
  for (Collective c : kAllCollectives) {
    if (collective_name(c) == name) return c;
  }
  return InvalidArgument("unknown collective '" + std::string(name) +
                         "': use allreduce, allgather, reduce_scatter, alltoall, broadcast or "
                         "sendrecv");
}

double bus_bandwidth_factor(Collective c, int ranks) {
  const double n = ranks;
  switch (c) {
    case Collective::kAllReduce: return 2 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return 1;
  }
  return 1;
}

CollectiveShape collective_shape(Collective c, size_t size_bytes, int ranks) {
  const size_t n = static_cast<size_t>(ranks);
  const size_t elements = size_bytes / sizeof(float);
  CollectiveShape s;
  switch (c) {
    case Collective::kAllReduce:
    case Collective::kBroadcast:
    case Collective::kSendRecv:
      s.count = s.send_count = s.recv_count = elements;
      break;
    case Collective::kAllGather:
      s.count = elements / n * n;
      s.send_count = s.count / n;
      s.recv_count = s.count;
      break;
    case Collective::kReduceScatter:
      s.count = elements / n * n;
      s.send_count = s.count;
      s.recv_count = s.count / n;
      break;
    case Collective::kAllToAll:
      s.count = elements / n * n;
      s.send_count = s.recv_count = s.count;
      break;
  }
  s.bytes = s.count * sizeof(float);
  return s;
}

Result<std::vector<size_t>> sweep_sizes(size_t min_bytes, size_t max_bytes, double factor) {
  if (min_bytes < sizeof(float) || min_bytes > max_bytes || !(factor > 1)) {
    return InvalidArgument("size sweep needs 4 <= --min-bytes <= --max-bytes and --factor > 1 (got " +
                           std::to_string(min_bytes) + ", " + std::to_string(max_bytes) + ", " +
                           std::to_string(factor) + ")");
  }
  std::vector<size_t> sizes;
  for (double s = static_cast<double>(min_bytes); s <= static_cast<double>(max_bytes) * 1.000001;
       s *= factor) {
    const size_t bytes = static_cast<size_t>(s) / sizeof(float) * sizeof(float);
    if (sizes.empty() || bytes != sizes.back()) sizes.push_back(bytes);
  }
  return sizes;
}

float input_value(int rank, size_t i) {
  return static_cast<float>((static_cast<size_t>(rank) * 7 + i) % 16 + 1);
}

void fill_send_buffer(Collective c, int rank, std::span<float> send) {
  if (c == Collective::kBroadcast && rank != 0) {
    std::fill(send.begin(), send.end(), -1.0f);  // must be overwritten by the root's data
    return;
  }
  for (size_t i = 0; i < send.size(); ++i) send[i] = input_value(rank, i);
}

float expected_value(Collective c, int rank, int ranks, size_t block, size_t i) {
  const size_t r = static_cast<size_t>(rank);
  auto sum_over_ranks = [ranks](size_t element) {
    float sum = 0;
    for (int s = 0; s < ranks; ++s) sum += input_value(s, element);
    return sum;
  };
  switch (c) {
    case Collective::kAllReduce: return sum_over_ranks(i);
    case Collective::kAllGather: return input_value(static_cast<int>(i / block), i % block);
    case Collective::kReduceScatter: return sum_over_ranks(r * block + i);
    case Collective::kAllToAll:
      return input_value(static_cast<int>(i / block), r * block + i % block);
    case Collective::kBroadcast: return input_value(0, i);
    case Collective::kSendRecv: return input_value(prev_rank(rank, ranks), i);
  }
  return std::numeric_limits<float>::quiet_NaN();
}

uint64_t count_wrong(Collective c, int rank, int ranks, std::span<const float> recv) {
  const bool blocked = c == Collective::kAllGather || c == Collective::kAllToAll;
  const size_t block = blocked ? recv.size() / static_cast<size_t>(ranks) : recv.size();
  uint64_t wrong = 0;
  for (size_t i = 0; i < recv.size(); ++i) {
    if (recv[i] != expected_value(c, rank, ranks, block, i)) ++wrong;
  }
  return wrong;
}

bool has_in_place(Collective c) { return c != Collective::kSendRecv; }

namespace {

// Fills `recv` with the in-place input of `c`: the whole input (allreduce, reduce-scatter,
// alltoall, broadcast's root), or only this rank's block (allgather).
void fill_in_place(Collective c, const CollectiveShape& s, int rank, std::vector<float>& recv) {
  if (c == Collective::kAllGather) {
    std::span<float> mine(recv.data() + static_cast<size_t>(rank) * s.send_count, s.send_count);
    fill_send_buffer(c, rank, mine);
    return;
  }
  fill_send_buffer(c, rank, recv);
}

}  // namespace

CollectiveBuffers make_collective_buffers(Collective c, Placement p, const CollectiveShape& s,
                                          int rank) {
  CollectiveBuffers b;
  if (p == Placement::kOutOfPlace) {
    b.send.resize(s.send_count);
    b.recv.assign(s.recv_count, -7.0f);
    fill_send_buffer(c, rank, b.send);
    return b;
  }
  // In place the buffer holds the larger of input and output.
  b.recv.assign(std::max(s.send_count, s.recv_count), -7.0f);
  fill_in_place(c, s, rank, b.recv);
  return b;
}

namespace {

using Buffers = CollectiveBuffers;

// Where the result lands: the receive buffer, or its first recv_count elements in place.
std::span<const float> result_of(const Buffers& b, const CollectiveShape& s) {
  return std::span<const float>(b.recv.data(), s.recv_count);
}

Status run_in_place(comm::Communicator& comm, Collective c, const CollectiveShape& s,
                    std::vector<float>& buf) {
  float* data = buf.data();
  switch (c) {
    case Collective::kAllReduce:
      return comm.allreduce(data, data, s.count, DType::kF32, comm::ReduceOp::kSum);
    case Collective::kAllGather:
      return comm.allgather(data + static_cast<size_t>(comm.rank()) * s.send_count, data,
                            s.send_count, DType::kF32);
    case Collective::kReduceScatter:
      return comm.reduce_scatter(data, data, s.recv_count, DType::kF32, comm::ReduceOp::kSum);
    case Collective::kAllToAll:
      return comm.alltoall(data, data, s.send_count / comm.size(), DType::kF32);
    case Collective::kBroadcast:
      return comm.broadcast(data, s.count, DType::kF32, 0);
    case Collective::kSendRecv: break;
  }
  return Internal(std::string(collective_name(c)) + " has no in-place form");
}

Status run_out_of_place(comm::Communicator& comm, Collective c, const CollectiveShape& s,
                        Buffers& b) {
  const int n = comm.size();
  const int r = comm.rank();
  switch (c) {
    case Collective::kAllReduce:
      return comm.allreduce(b.send.data(), b.recv.data(), s.send_count, DType::kF32,
                            comm::ReduceOp::kSum);
    case Collective::kAllGather:
      return comm.allgather(b.send.data(), b.recv.data(), s.send_count, DType::kF32);
    case Collective::kReduceScatter:
      return comm.reduce_scatter(b.send.data(), b.recv.data(), s.recv_count, DType::kF32,
                                 comm::ReduceOp::kSum);
    case Collective::kAllToAll:
      return comm.alltoall(b.send.data(), b.recv.data(), s.send_count / n, DType::kF32);
    case Collective::kBroadcast:
      // Only the root's input moves: MPI broadcasts within one buffer, so the root copies its
      // input over first (the copy nccl-tests' out-of-place broadcast makes too).
      if (r == 0) std::copy(b.send.begin(), b.send.end(), b.recv.begin());
      return comm.broadcast(b.recv.data(), s.recv_count, DType::kF32, 0);
    case Collective::kSendRecv: {
      MS_ASSIGN_OR_RETURN(comm::Request rx, comm.irecv(b.recv.data(), s.recv_count, DType::kF32,
                                                        prev_rank(r, n), kP2pTag));
      MS_ASSIGN_OR_RETURN(comm::Request tx, comm.isend(b.send.data(), s.send_count, DType::kF32,
                                                        next_rank(r, n), kP2pTag));
      MS_RETURN_IF_ERROR(tx.wait());
      return rx.wait();
    }
  }
  return Internal("unknown collective");
}

// One operation of `c` on prepared buffers.
Status run_once(comm::Communicator& comm, Collective c, Placement p, const CollectiveShape& s,
                Buffers& b) {
  return p == Placement::kInPlace ? run_in_place(comm, c, s, b.recv)
                                  : run_out_of_place(comm, c, s, b);
}

// Fresh buffers, one operation, and the wrong elements summed over all ranks.
Result<uint64_t> verify_once(comm::Communicator& comm, Collective c, Placement p,
                             const CollectiveShape& s) {
  Buffers b = make_collective_buffers(c, p, s, comm.rank());
  MS_RETURN_IF_ERROR(run_once(comm, c, p, s, b));
  int64_t wrong =
      static_cast<int64_t>(count_wrong(c, comm.rank(), comm.size(), result_of(b, s)));
  int64_t total = 0;
  MS_RETURN_IF_ERROR(comm.allreduce(&wrong, &total, 1, DType::kI64, comm::ReduceOp::kSum));
  return static_cast<uint64_t>(total);
}

// One pass as nccl-tests times it: a barrier, options.iters operations, and the slowest rank's
// mean time per operation.
Result<double> time_pass(comm::Communicator& comm, Collective c, Placement p,
                         const CollectiveShape& s, const CheckOptions& options, Buffers& b) {
  MS_RETURN_IF_ERROR(comm.barrier());
  Stopwatch watch;
  for (int i = 0; i < options.iters; ++i) MS_RETURN_IF_ERROR(run_once(comm, c, p, s, b));
  // MPI carries no f64 in this toolkit's DType set; f32 keeps 7 digits of a time, plenty.
  const float mean_s = static_cast<float>(watch.elapsed_s() / std::max(options.iters, 1));
  float slowest = 0;
  MS_RETURN_IF_ERROR(comm.allreduce(&mean_s, &slowest, 1, DType::kF32, comm::ReduceOp::kMax));
  return static_cast<double>(slowest);
}

// The best of options.rounds passes, after options.warmup untimed operations. One pass is a
// single sample of a machine whose load may change several-fold from one second to the next
// (cores shared with other jobs); the best pass is what the network and MPI can do, which is
// what check is for, the same rule as the per-rank benchmarks. Every rank agrees on the value
// (each pass's time is already reduced over the ranks).
Result<double> time_placement(comm::Communicator& comm, Collective c, Placement p,
                              const CollectiveShape& s, const CheckOptions& options) {
  Buffers b = make_collective_buffers(c, p, s, comm.rank());
  for (int i = 0; i < options.warmup; ++i) MS_RETURN_IF_ERROR(run_once(comm, c, p, s, b));
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < std::max(options.rounds, 1); ++round) {
    MS_ASSIGN_OR_RETURN(const double seconds, time_pass(comm, c, p, s, options, b));
    best = std::min(best, seconds);
  }
  return best;
}

Result<PlacementResult> run_placement(comm::Communicator& comm, Collective c, Placement p,
                                      const CollectiveShape& s, const CheckOptions& options) {
  PlacementResult result;
  MS_ASSIGN_OR_RETURN(const double seconds, time_placement(comm, c, p, s, options));
  result.measured = true;
  result.time_us = seconds * 1e6;
  result.algbw_gbs = seconds > 0 ? static_cast<double>(s.bytes) / seconds / 1e9 : 0;
  result.busbw_gbs = result.algbw_gbs * bus_bandwidth_factor(c, comm.size());
  MS_ASSIGN_OR_RETURN(result.wrong, verify_once(comm, c, p, s));
  return result;
}

}  // namespace

Result<CollectiveResult> run_collective(comm::Communicator& comm, Collective c, size_t size_bytes,
                                        const CheckOptions& options) {
  const CollectiveShape s = collective_shape(c, size_bytes, comm.size());
  CollectiveResult result;
  result.collective = c;
  result.bytes = s.bytes;
  result.count = s.count;
  result.root = c == Collective::kBroadcast ? 0 : -1;
  MS_ASSIGN_OR_RETURN(result.out_of_place,
                      run_placement(comm, c, Placement::kOutOfPlace, s, options));
  if (has_in_place(c)) {
    MS_ASSIGN_OR_RETURN(result.in_place, run_placement(comm, c, Placement::kInPlace, s, options));
  }
  return result;
}

Status wait_quietly(comm::Request& request) {
  for (;;) {
    MS_ASSIGN_OR_RETURN(bool done, request.test());
    if (done) return Status::OK();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

Status quiet_barrier(comm::Communicator& comm) {
  int32_t one = 1;
  int32_t sum = 0;
  MS_ASSIGN_OR_RETURN(comm::Request request,
                      comm.iallreduce(&one, &sum, 1, DType::kI32, comm::ReduceOp::kSum));
  return wait_quietly(request);
}

namespace {

// src's best time, over options.p2p_reps messages, to send one message to dst and get dst's
// one-byte acknowledgement (dst returns 0). Timing each message apart and keeping the best
// makes the number immune to a rank being descheduled for part of the run.
Result<double> time_pair(comm::Communicator& comm, int src, int dst, const CheckOptions& options,
                         std::vector<char>& buffer) {
  const size_t bytes = options.p2p_bytes;
  char ack = 0;
  double best_s = std::numeric_limits<double>::infinity();
  for (int i = 0; i < options.p2p_reps; ++i) {
    if (comm.rank() == dst) {
      MS_RETURN_IF_ERROR(comm.recv(buffer.data(), bytes, DType::kU8, src, kP2pTag));
      MS_RETURN_IF_ERROR(comm.send(&ack, 1, DType::kU8, src, kP2pTag));
      continue;
    }
    Stopwatch watch;
    MS_RETURN_IF_ERROR(comm.send(buffer.data(), bytes, DType::kU8, dst, kP2pTag));
    MS_RETURN_IF_ERROR(comm.recv(&ack, 1, DType::kU8, dst, kP2pTag));
    best_s = std::min(best_s, watch.elapsed_s());
  }
  if (comm.rank() == dst) return 0.0;
  if (src == options.injection.rank || dst == options.injection.rank) {
    best_s *= options.injection.factor;
  }
  return best_s;
}

}  // namespace

Result<P2pMatrix> measure_p2p_matrix(comm::Communicator& comm, const CheckOptions& options) {
  const int n = comm.size();
  std::vector<char> buffer(options.p2p_bytes, 1);
  std::vector<float> my_row(n, 0.0f);
  for (int pair = 0; pair < n * n * std::max(options.rounds, 1); ++pair) {
    const int src = pair / n % n;
    const int dst = pair % n;
    if (src == dst) continue;
    MS_RETURN_IF_ERROR(quiet_barrier(comm));
    if (comm.rank() != src && comm.rank() != dst) continue;
    MS_ASSIGN_OR_RETURN(double seconds, time_pair(comm, src, dst, options, buffer));
    if (comm.rank() == src) {
      const double gbs = static_cast<double>(options.p2p_bytes) / seconds / 1e9;
      my_row[dst] = std::max(my_row[dst], static_cast<float>(gbs));
    }
  }
  P2pMatrix matrix;
  matrix.ranks = n;
  std::vector<float> all(static_cast<size_t>(n) * n);
  MS_RETURN_IF_ERROR(comm.allgather(my_row.data(), all.data(), n, DType::kF32));
  matrix.gbs.assign(all.begin(), all.end());
  return matrix;
}

std::vector<SlowLink> find_slow_links(const P2pMatrix& matrix, const HealthOptions& options) {
  std::vector<double> cells;
  for (int s = 0; s < matrix.ranks; ++s) {
    for (int d = 0; d < matrix.ranks; ++d) {
      if (s != d) cells.push_back(matrix.at(s, d));
    }
  }
  std::vector<SlowLink> slow;
  for (int s = 0; s < matrix.ranks; ++s) {
    for (int d = 0; d < matrix.ranks; ++d) {
      SlowLink link{s, d, {}};
      if (s == d || !is_suspect_value(matrix.at(s, d), cells, options, link.finding)) continue;
      link.finding.subject = std::to_string(s) + "->" + std::to_string(d);
      link.finding.metric = "p2p_gbs";
      slow.push_back(std::move(link));
    }
  }
  return slow;
}

namespace {

void keep_best(std::map<std::string, double>& best, const std::string& name, double value) {
  auto it = best.find(name);
  if (it == best.end() || value > it->second) best[name] = value;
}

// This rank's compute and memory numbers, taken while every other rank sleeps; turns go
// round-robin options.rounds times and the best of each metric is kept.
Result<std::map<std::string, double>> measure_rank_sequentially(comm::Communicator& comm,
                                                                const CheckOptions& options,
                                                                std::vector<std::string>& faults) {
  std::map<std::string, double> metrics;
  const double slow = options.injection.rank == comm.rank() ? options.injection.factor : 1.0;
  for (int turn = 0; turn < comm.size() * std::max(options.rounds, 1); ++turn) {
    MS_RETURN_IF_ERROR(quiet_barrier(comm));
    if (turn % comm.size() != comm.rank()) continue;
    keep_best(metrics, "sgemm_gflops",
              ops::measure_sgemm_gflops(options.sgemm_n, options.compute_reps) / slow);
    keep_best(metrics, "triad_gbs",
              measure_stream_gbs(StreamKernel::kTriad, options.triad_elements,
                                 options.compute_reps) /
                  slow);
    for (const auto& [name, value] :
         gpu_rank_metrics(comm.rank(), options.gpu, options.compute_reps, &faults)) {
      keep_best(metrics, name, value / slow);
    }
  }
  return metrics;
}

// Gathers every rank's (host, metrics) on every rank, as JSON text.
Result<std::vector<RankMeasurement>> gather_measurements(comm::Communicator& comm,
                                                         const RankMeasurement& mine) {
  const std::string text = nlohmann::json{{"rank", mine.rank},
                                          {"host", mine.host},
                                          {"metrics", mine.metrics},
                                          {"faults", mine.faults}}
                               .dump();
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> texts, comm::all_gather_variable(comm, text));
  std::vector<RankMeasurement> ranks;
  for (const std::string& t : texts) {
    const nlohmann::json j = nlohmann::json::parse(t);
    ranks.push_back({j["rank"].get<int>(), j["host"].get<std::string>(),
                     j["metrics"].get<std::map<std::string, double>>(),
                     j["faults"].get<std::vector<std::string>>()});
  }
  return ranks;
}

// Each rank's best send and receive bandwidth over its row and column of the matrix. The best,
// not the median: a rank with a slow NIC is slow to every peer, while a healthy rank keeps fast
// links to its healthy peers, so one slow rank does not drag its peers' numbers (single slow
// links are found by find_slow_links).
void add_p2p_metrics(const P2pMatrix& matrix, std::vector<RankMeasurement>& ranks) {
  if (matrix.ranks < 2) return;
  for (RankMeasurement& r : ranks) {
    std::vector<double> out, in;
    for (int peer = 0; peer < matrix.ranks; ++peer) {
      if (peer == r.rank) continue;
      out.push_back(matrix.at(r.rank, peer));
      in.push_back(matrix.at(peer, r.rank));
    }
    r.metrics["p2p_send_gbs"] = *std::max_element(out.begin(), out.end());
    r.metrics["p2p_recv_gbs"] = *std::max_element(in.begin(), in.end());
  }
}

}  // namespace

Result<CheckResults> run_check(comm::Communicator& comm, const std::string& host,
                               const CheckOptions& options) {
  MS_ASSIGN_OR_RETURN(std::vector<size_t> sizes,
                      sweep_sizes(options.min_bytes, options.max_bytes, options.factor));
  CheckResults results;
  RankMeasurement mine{comm.rank(), host, {}, {}};
  MS_ASSIGN_OR_RETURN(mine.metrics, measure_rank_sequentially(comm, options, mine.faults));
  // A probe that fails in every round is one fault, not one per round.
  std::sort(mine.faults.begin(), mine.faults.end());
  mine.faults.erase(std::unique(mine.faults.begin(), mine.faults.end()), mine.faults.end());
  if (options.gpu_health) {
    for (std::string& fault : gpu_health_faults(comm.rank())) mine.faults.push_back(fault);
  }
  for (Collective c : options.collectives) {
    std::vector<CollectiveResult> rows;
    for (size_t size : sizes) {
      MS_ASSIGN_OR_RETURN(CollectiveResult row, run_collective(comm, c, size, options));
      rows.push_back(row);
    }
    results.collectives.push_back(std::move(rows));
  }
  MS_ASSIGN_OR_RETURN(results.p2p, measure_p2p_matrix(comm, options));
  MS_ASSIGN_OR_RETURN(results.ranks, gather_measurements(comm, mine));
  add_p2p_metrics(results.p2p, results.ranks);
  return results;
}

namespace {

// "    time   algbw   busbw #wrong" columns of one placement, or N/A.
std::string placement_columns(const PlacementResult& p) {
  char text[96];
  if (!p.measured) {
    std::snprintf(text, sizeof(text), " %10s %8s %8s %7s", "N/A", "N/A", "N/A", "N/A");
  } else {
    std::snprintf(text, sizeof(text), " %10.2f %8.3f %8.3f %7llu", p.time_us, p.algbw_gbs,
                  p.busbw_gbs, static_cast<unsigned long long>(p.wrong));
  }
  return text;
}

}  // namespace

double peak_busbw_gbs(std::span<const CollectiveResult> rows) {
  double peak = 0;
  for (const CollectiveResult& r : rows) {
    for (const PlacementResult* p : {&r.out_of_place, &r.in_place}) {
      if (p->measured) peak = std::max(peak, p->busbw_gbs);
    }
  }
  return peak;
}

std::string format_collective_table(Collective c, int ranks,
                                    std::span<const CollectiveResult> rows) {
  std::string out;
  char line[320];
  std::snprintf(line, sizeof(line), "#\n# Collective test: %s, %d rank(s), busbw factor %.4g\n#\n",
                std::string(collective_name(c)).c_str(), ranks, bus_bandwidth_factor(c, ranks));
  out += line;
  std::snprintf(line, sizeof(line), "# %10s %12s %8s %6s %6s %36s %36s\n", "", "", "", "", "",
                "out-of-place", "in-place");
  out += line;
  std::snprintf(line, sizeof(line),
                "# %10s %12s %8s %6s %6s %10s %8s %8s %7s %10s %8s %8s %7s\n", "size", "count",
                "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                "busbw", "#wrong");
  out += line;
  std::snprintf(line, sizeof(line), "# %10s %12s %8s %6s %6s %10s %8s %8s %7s %10s %8s %8s\n",
                "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                "(GB/s)");
  out += line;
  const bool reduces = c == Collective::kAllReduce || c == Collective::kReduceScatter;
  double busbw_sum = 0;
  int measured = 0;
  for (const CollectiveResult& r : rows) {
    std::snprintf(line, sizeof(line), "  %10zu %12zu %8s %6s %6d", r.bytes, r.count, "float",
                  reduces ? "sum" : "none", r.root);
    out += line + placement_columns(r.out_of_place) + placement_columns(r.in_place) + "\n";
    for (const PlacementResult* p : {&r.out_of_place, &r.in_place}) {
      if (!p->measured) continue;
      busbw_sum += p->busbw_gbs;
      ++measured;
    }
  }
  std::snprintf(line, sizeof(line), "# Avg bus bandwidth    : %.4f GB/s (%s)\n",
                measured == 0 ? 0.0 : busbw_sum / measured,
                std::string(collective_name(c)).c_str());
  out += line;
  return out;
}

}  // namespace ms::diag
