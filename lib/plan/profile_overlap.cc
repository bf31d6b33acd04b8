// The dp-reduction cost probe; see profile_overlap.h.
#include "plan/profile_overlap.h"

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "ops/gemm.h"
#include "plan/profile_timer.h"

namespace ms::plan {
namespace {

// 16 MiB of gradients in 4 buckets of 4 MiB, about a layer's worth each as the trainer's
// buckets are: bandwidth, not latency, sets the reduction's time.
constexpr size_t kGradientFloats = size_t{4} << 20;
constexpr int kBuckets = 4;
constexpr int kLayers = 16;          // compute chunks of the backward, one test after each
constexpr double kLayerSeconds = 0.01;  // a chunk: a layer's backward of a small model
constexpr int kRounds = 3;           // rank 0 takes the lower quartile of each phase over these
constexpr int64_t kGemm = 192;       // chunks are made of 192^3 GEMMs (a fraction of a ms each)

struct Gemm {
  std::vector<float> a = std::vector<float>(kGemm * kGemm, 0.01f),
                     b = std::vector<float>(kGemm * kGemm, 0.02f),
                     c = std::vector<float>(kGemm * kGemm, 0.0f);
  void run() {
    ops::sgemm(ops::Transpose::kNo, ops::Transpose::kNo, kGemm, kGemm, kGemm, 1.0f, a.data(),
               kGemm, b.data(), kGemm, 0.0f, c.data(), kGemm);
  }
};

// Agreed over the group: rank 0's value.
Result<double> agreed(comm::Communicator& group, double value) {
  MS_RETURN_IF_ERROR(group.broadcast(&value, sizeof(value), DType::kU8, 0));
  return value;
}

enum class Kind { kReduceScatter, kAllReduce };

// Seconds per MiB of gradients the overlapped reduction of `kind` adds to a backward of
// kLayers chunks of `gemms` GEMMs each.
Result<double> cost_per_mib(comm::Communicator& group, Kind kind, int gemms) {
  const size_t n = static_cast<size_t>(group.size());
  const size_t bucket = kGradientFloats / kBuckets / n * n;  // divisible by the group
  std::vector<float> send(bucket * kBuckets, 1.0f), recv(bucket * kBuckets / n);
  Gemm gemm;
  const auto layer = [&] {
    for (int g = 0; g < gemms; ++g) gemm.run();
  };
  // As the trainer calls them: the all-reduce in place on the gradients (MPI_IN_PLACE), the
  // reduce-scatter from the gradients into a shard.
  const auto issue = [&](size_t b) -> Result<comm::Request> {
    float* in = send.data() + b * bucket;
    if (kind == Kind::kAllReduce) {
      return group.iallreduce(in, in, bucket, DType::kF32, comm::ReduceOp::kSum);
    }
    return group.ireduce_scatter(in, recv.data() + b * (bucket / n), bucket / n, DType::kF32,
                                 comm::ReduceOp::kSum);
  };
  {  // warm: connections, buffers, the collective's first-call setup
    MS_ASSIGN_OR_RETURN(comm::Request warm, issue(0));
    MS_RETURN_IF_ERROR(warm.wait());
  }
  std::vector<double> compute_s, overlapped_s;
  for (int i = 0; i < kRounds; ++i) {
    MS_RETURN_IF_ERROR(group.barrier());
    Stopwatch watch;
    for (int l = 0; l < kLayers; ++l) layer();
    compute_s.push_back(watch.elapsed_s());
    MS_RETURN_IF_ERROR(group.barrier());
    watch.reset();
    std::vector<comm::Request> inflight;
    for (int l = 0; l < kLayers; ++l) {
      layer();
      for (comm::Request& r : inflight) {
        if (!r.done()) MS_RETURN_IF_ERROR(r.test().status());
      }
      if ((l + 1) % (kLayers / kBuckets) == 0) {
        MS_ASSIGN_OR_RETURN(comm::Request r, issue(inflight.size()));
        inflight.push_back(std::move(r));
      }
    }
    for (comm::Request& r : inflight) MS_RETURN_IF_ERROR(r.wait());
    overlapped_s.push_back(watch.elapsed_s());
  }
  const double mib = static_cast<double>(send.size()) * sizeof(float) / (1 << 20);
  const double added = std::max(0.0, lower_quartile(overlapped_s) - lower_quartile(compute_s));
  return agreed(group, added / mib);
}

}  // namespace

Result<DpReductionCost> measure_dp_reduction_cost(comm::Communicator& group) {
  // The chunk: as many GEMMs as take about a layer's backward, timed on rank 0.
  Gemm gemm;
  gemm.run();
  std::vector<double> gemm_s;
  for (int i = 0; i < 5; ++i) {
    Stopwatch watch;
    gemm.run();
    gemm_s.push_back(watch.elapsed_s());
  }
  MS_ASSIGN_OR_RETURN(const double one, agreed(group, std::max(1e-6, lower_quartile(gemm_s))));
  const int gemms = std::clamp(static_cast<int>(kLayerSeconds / one), 1, 1000);
  DpReductionCost cost;
  cost.ranks = group.size();
  MS_ASSIGN_OR_RETURN(cost.reduce_scatter_s_per_mib,
                      cost_per_mib(group, Kind::kReduceScatter, gemms));
  MS_ASSIGN_OR_RETURN(cost.allreduce_s_per_mib, cost_per_mib(group, Kind::kAllReduce, gemms));
  return cost;
}

}  // namespace ms::plan
