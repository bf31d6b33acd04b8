// check's sweep over NCCL; see check_nccl.h. Without NCCL in the build only the refusal is
// compiled.
#include "diag/check_nccl.h"

#include <algorithm>
#include <limits>
#include <span>

#include "core/timer.h"
#ifdef MS_HAVE_NCCL
#include "comm/nccl_communicator.h"
#include "kernels/device.h"
#endif

namespace ms::diag {

bool has_nccl_in_place(Collective c) {
  return c != Collective::kAllToAll && c != Collective::kSendRecv;
}

#ifdef MS_HAVE_NCCL
namespace {

int next_of(int r, int n) { return (r + 1) % n; }
int prev_of(int r, int n) { return (r + n - 1) % n; }

// One placement's device buffers, uploaded from the exact host input.
struct DeviceBuffers {
  kernels::DeviceBuffer send, recv;
  size_t recv_elements = 0;
};

Result<DeviceBuffers> upload(const CollectiveBuffers& host) {
  DeviceBuffers d;
  MS_ASSIGN_OR_RETURN(d.send, kernels::DeviceBuffer::allocate(host.send.size() * sizeof(float)));
  MS_ASSIGN_OR_RETURN(d.recv, kernels::DeviceBuffer::allocate(host.recv.size() * sizeof(float)));
  MS_RETURN_IF_ERROR(
      kernels::copy_to_device(d.send.data(), host.send.data(), host.send.size() * sizeof(float)));
  MS_RETURN_IF_ERROR(
      kernels::copy_to_device(d.recv.data(), host.recv.data(), host.recv.size() * sizeof(float)));
  d.recv_elements = host.recv.size();
  return d;
}

// Where the result starts in the receive buffer: NCCL's in-place reduce-scatter leaves rank r's
// block at r * recv_count; everything else at 0.
size_t result_offset(Collective c, Placement p, const CollectiveShape& s, int rank) {
  return c == Collective::kReduceScatter && p == Placement::kInPlace
             ? static_cast<size_t>(rank) * s.recv_count
             : 0;
}

Status run_once(comm::NcclCommunicator& nccl, Collective c, Placement p, const CollectiveShape& s,
                DeviceBuffers& b) {
  const int n = nccl.size();
  const int r = nccl.rank();
  float* send = b.send.as<float>();
  float* recv = b.recv.as<float>();
  if (p == Placement::kInPlace) {
    switch (c) {
      case Collective::kAllReduce:
        return nccl.allreduce(recv, recv, s.count, DType::kF32, comm::ReduceOp::kSum);
      case Collective::kAllGather:
        return nccl.allgather(recv + static_cast<size_t>(r) * s.send_count, recv, s.send_count,
                              DType::kF32);
      case Collective::kReduceScatter:
        return nccl.reduce_scatter(recv, recv + result_offset(c, p, s, r), s.recv_count,
                                   DType::kF32, comm::ReduceOp::kSum);
      case Collective::kBroadcast:
        return nccl.broadcast(recv, s.count, DType::kF32, 0);
      default:
        return Internal(std::string(collective_name(c)) + " is not run in place over NCCL");
    }
  }
  switch (c) {
    case Collective::kAllReduce:
      return nccl.allreduce(send, recv, s.send_count, DType::kF32, comm::ReduceOp::kSum);
    case Collective::kAllGather:
      return nccl.allgather(send, recv, s.send_count, DType::kF32);
    case Collective::kReduceScatter:
      return nccl.reduce_scatter(send, recv, s.recv_count, DType::kF32, comm::ReduceOp::kSum);
    case Collective::kAllToAll:
      return nccl.alltoall(send, recv, s.send_count / n, DType::kF32);
    case Collective::kBroadcast:
      // As the MPI sweep: the root copies its input into the one buffer NCCL broadcasts, on
      // the communicator's stream so the broadcast sees it.
      if (r == 0) {
        MS_RETURN_IF_ERROR(kernels::copy_on_device(recv, send, s.send_count * sizeof(float),
                                                   nccl.stream()));
      }
      return nccl.broadcast(recv, s.recv_count, DType::kF32, 0);
    case Collective::kSendRecv: {
      // One group (alltoallv with a single non-zero count each way): separate sends and
      // receives around a ring would each wait for the other.
      std::vector<size_t> send_counts(static_cast<size_t>(n), 0), recv_counts(send_counts);
      send_counts[static_cast<size_t>(next_of(r, n))] = s.send_count;
      recv_counts[static_cast<size_t>(prev_of(r, n))] = s.recv_count;
      if (n == 1) send_counts[0] = recv_counts[0] = s.send_count;
      return nccl.alltoallv(send, send_counts, recv, recv_counts, DType::kF32);
    }
  }
  return Internal("unknown collective");
}

Result<uint64_t> verify_once(comm::MpiCommunicator& world, comm::NcclCommunicator& nccl,
                             Collective c, Placement p, const CollectiveShape& s) {
  const CollectiveBuffers host = make_collective_buffers(c, p, s, nccl.rank());
  MS_ASSIGN_OR_RETURN(DeviceBuffers d, upload(host));
  MS_RETURN_IF_ERROR(run_once(nccl, c, p, s, d));
  std::vector<float> back(d.recv_elements);
  MS_RETURN_IF_ERROR(kernels::copy_to_host(back.data(), d.recv.data(), back.size() * sizeof(float)));
  const std::span<const float> result(back.data() + result_offset(c, p, s, nccl.rank()),
                                      s.recv_count);
  int64_t wrong = static_cast<int64_t>(count_wrong(c, nccl.rank(), nccl.size(), result));
  int64_t total = 0;
  MS_RETURN_IF_ERROR(world.allreduce(&wrong, &total, 1, DType::kI64, comm::ReduceOp::kSum));
  return static_cast<uint64_t>(total);
}

// The best of options.rounds passes of options.iters operations after options.warmup, each
// pass's time the slowest rank's mean (the MPI sweep's rule).
Result<double> time_placement(comm::MpiCommunicator& world, comm::NcclCommunicator& nccl,
                              Collective c, Placement p, const CollectiveShape& s,
                              const CheckOptions& options) {
  MS_ASSIGN_OR_RETURN(DeviceBuffers d, upload(make_collective_buffers(c, p, s, nccl.rank())));
  for (int i = 0; i < options.warmup; ++i) MS_RETURN_IF_ERROR(run_once(nccl, c, p, s, d));
  double best = std::numeric_limits<double>::infinity();
  for (int round = 0; round < std::max(options.rounds, 1); ++round) {
    MS_RETURN_IF_ERROR(nccl.barrier());
    Stopwatch watch;
    for (int i = 0; i < options.iters; ++i) MS_RETURN_IF_ERROR(run_once(nccl, c, p, s, d));
    const float mean_s = static_cast<float>(watch.elapsed_s() / std::max(options.iters, 1));
    float slowest = 0;
    MS_RETURN_IF_ERROR(world.allreduce(&mean_s, &slowest, 1, DType::kF32, comm::ReduceOp::kMax));
    best = std::min(best, static_cast<double>(slowest));
  }
  return best;
}

Result<PlacementResult> run_placement(comm::MpiCommunicator& world, comm::NcclCommunicator& nccl,
                                      Collective c, Placement p, const CollectiveShape& s,
                                      const CheckOptions& options) {
  PlacementResult result;
  MS_ASSIGN_OR_RETURN(const double seconds, time_placement(world, nccl, c, p, s, options));
  result.measured = true;
  result.time_us = seconds * 1e6;
  result.algbw_gbs = seconds > 0 ? static_cast<double>(s.bytes) / seconds / 1e9 : 0;
  result.busbw_gbs = result.algbw_gbs * bus_bandwidth_factor(c, nccl.size());
  MS_ASSIGN_OR_RETURN(result.wrong, verify_once(world, nccl, c, p, s));
  return result;
}

}  // namespace

Result<std::vector<std::vector<CollectiveResult>>> run_nccl_collectives(
    comm::MpiCommunicator& world, const CheckOptions& options) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<comm::NcclCommunicator> nccl,
                      comm::NcclCommunicator::create(world, "check-nccl"));
  MS_ASSIGN_OR_RETURN(const std::vector<size_t> sizes,
                      sweep_sizes(options.min_bytes, options.max_bytes, options.factor));
  std::vector<std::vector<CollectiveResult>> all;
  for (const Collective c : options.collectives) {
    std::vector<CollectiveResult> rows;
    for (const size_t size : sizes) {
      const CollectiveShape s = collective_shape(c, size, nccl->size());
      CollectiveResult row;
      row.collective = c;
      row.bytes = s.bytes;
      row.count = s.count;
      row.root = c == Collective::kBroadcast ? 0 : -1;
      MS_ASSIGN_OR_RETURN(row.out_of_place,
                          run_placement(world, *nccl, c, Placement::kOutOfPlace, s, options));
      if (has_nccl_in_place(c)) {
        MS_ASSIGN_OR_RETURN(row.in_place,
                            run_placement(world, *nccl, c, Placement::kInPlace, s, options));
      }
      rows.push_back(row);
    }
    all.push_back(std::move(rows));
  }
  return all;
}
#else
Result<std::vector<std::vector<CollectiveResult>>> run_nccl_collectives(comm::MpiCommunicator&,
                                                                        const CheckOptions&) {
  return Unavailable("NCCL collectives: this build has no NCCL (configure with -DMS_CUDA=ON)");
}
#endif

}  // namespace ms::diag
