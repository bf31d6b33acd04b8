// The dp-reduction overlap probe; see profile_overlap.h.
#include "plan/profile_overlap.h"

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "ops/gemm.h"
#include "plan/profile_timer.h"

namespace ms::plan {
namespace {

// 16 MiB of gradients in 4 buckets: large enough that bandwidth, not latency, sets the
// reduction's time, as for a model's gradients.
constexpr size_t kGradientFloats = size_t{4} << 20;
constexpr int kBuckets = 4;
constexpr int kRounds = 5;  // rank 0 takes the lower quartile of each phase over these
constexpr int64_t kChunk = 192;  // a GEMM of 192^3: a backward chunk of a few milliseconds

struct Gemm {
  std::vector<float> a = std::vector<float>(kChunk * kChunk, 0.01f),
                     b = std::vector<float>(kChunk * kChunk, 0.02f),
                     c = std::vector<float>(kChunk * kChunk, 0.0f);
  void run() {
    ops::sgemm(ops::Transpose::kNo, ops::Transpose::kNo, kChunk, kChunk, kChunk, 1.0f, a.data(),
               kChunk, b.data(), kChunk, 0.0f, c.data(), kChunk);
  }
};

// Agreed over the group: rank 0's value.
Result<double> agreed(comm::Communicator& group, double value) {
  MS_RETURN_IF_ERROR(group.broadcast(&value, sizeof(value), DType::kU8, 0));
  return value;
}

}  // namespace

Result<double> measure_dp_hidden_share(comm::Communicator& group) {
  std::vector<float> send(kGradientFloats, 1.0f), recv(kGradientFloats);
  Gemm gemm;
  const size_t bucket = kGradientFloats / kBuckets;
  const auto reduce_all = [&]() -> Status {
    return group.allreduce(send.data(), recv.data(), kGradientFloats, DType::kF32,
                           comm::ReduceOp::kSum);
  };
  MS_RETURN_IF_ERROR(reduce_all());  // warm: connections, buffers
  gemm.run();
  std::vector<double> reduce_s, chunk_s;
  for (int i = 0; i < kRounds; ++i) {
    MS_RETURN_IF_ERROR(group.barrier());
    Stopwatch watch;
    MS_RETURN_IF_ERROR(reduce_all());
    reduce_s.push_back(watch.elapsed_s());
    watch.reset();
    gemm.run();
    chunk_s.push_back(watch.elapsed_s());
  }
  MS_ASSIGN_OR_RETURN(const double reduce, agreed(group, lower_quartile(reduce_s)));
  MS_ASSIGN_OR_RETURN(const double chunk, agreed(group, std::max(1e-6, lower_quartile(chunk_s))));
  // A backward about as long as the reduction alone, in whole quarters.
  const int chunks = kBuckets * std::clamp(static_cast<int>(reduce / chunk / kBuckets) + 1, 1, 500);
  std::vector<double> compute_s, overlapped_s;
  for (int i = 0; i < kRounds; ++i) {
    MS_RETURN_IF_ERROR(group.barrier());
    Stopwatch watch;
    for (int c = 0; c < chunks; ++c) gemm.run();
    compute_s.push_back(watch.elapsed_s());
    MS_RETURN_IF_ERROR(group.barrier());
    watch.reset();
    std::vector<comm::Request> inflight;
    for (int c = 0; c < chunks; ++c) {
      gemm.run();
      for (comm::Request& r : inflight) {
        if (!r.done()) MS_RETURN_IF_ERROR(r.test().status());
      }
      if ((c + 1) % (chunks / kBuckets) == 0) {
        const size_t at = bucket * inflight.size();
        MS_ASSIGN_OR_RETURN(comm::Request r,
                            group.iallreduce(send.data() + at, recv.data() + at, bucket,
                                             DType::kF32, comm::ReduceOp::kSum));
        inflight.push_back(std::move(r));
      }
    }
    for (comm::Request& r : inflight) MS_RETURN_IF_ERROR(r.wait());
    overlapped_s.push_back(watch.elapsed_s());
  }
  const double exposed = lower_quartile(overlapped_s) - lower_quartile(compute_s);
  return agreed(group, std::clamp(1.0 - exposed / std::max(1e-9, reduce), -1.0, 1.0));
}

}  // namespace ms::plan
