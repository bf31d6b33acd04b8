// DistributedOptimizer: data parallelism for the trainer. It owns every parameter's values and
// gradients as two flat fp32 buffers (FlatLayout; the model's tensors become views into them),
// reduces gradients over the data-parallel group in buckets that start while backward is still
// running, and applies the optimizer:
//   - plain data parallelism (parallel.zero 0): each bucket is all-reduced (summed) in place;
//     every rank updates every parameter with the full optimizer state;
//   - ZeRO-1 (parallel.zero 1): each bucket is reduce-scattered into this rank's shard; the rank
//     keeps the optimizer moments and a master copy of its shard only, updates it, and the
//     updated shards are all-gathered back into the flat parameter buffer.
// The sum is averaged by folding 1/dp into the optimizer's gradient scale.
//
// Overlap: OpenMPI progresses nonblocking collectives only inside MPI calls, so the model calls
// poll() between compute chunks of backward, which tests the in-flight requests. Buckets are
// issued strictly in bucket order, so every rank issues the same collectives in the same order
// whatever order gradients finish in. The step's parallel::CommStats measures how much of the
// reduction the overlap hid: 1 - (time blocked in the final wait) / (time from the first issue
// to the last completion).
//
// Threading: every method runs on the thread that initialized MPI.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "config/run_config.h"
#include "core/status.h"
#include "core/tensor.h"
#include "ops/backend.h"
#include "ops/device_array.h"
#include "parallel/comm_stats.h"
#include "parallel/compressed_dp.h"
#include "train/flat_layout.h"
#include "train/optimizer.h"

namespace ms::train {

// One trainable tensor as the distributed optimizer sees it. `value` and `grad` must be f32
// tensors of the same shape (on the host or on the backend's device); create() moves their
// contents into the flat buffers, in the backend's device memory, and replaces both with views
// of them, so they must stay where they are for the optimizer's lifetime.
struct TrainableParam {
  std::string name;
  Tensor* value = nullptr;
  Tensor* grad = nullptr;
  bool weight_decay = true;
  // With tensor parallelism: every tp rank holds this tensor whole (norms, the router), so it
  // counts once in norms summed over tp; false for a tp slice.
  bool tp_replicated = true;
  // With pipeline parallelism: false for the last stage's copy of a tied embedding, which the
  // first stage's copy already counts in the gradient norm (both hold the same gradient once
  // the embedding group summed them).
  bool norm_counted = true;
};

// A finished collective, for traces: `op` is "allreduce", "reduce_scatter" or "allgather".
struct CommEvent {
  const char* op = "";
  uint64_t seq = 0;
  uint64_t bytes = 0;
  double t0 = 0;  // wall seconds when issued
  double t1 = 0;  // wall seconds when completion was observed
};

struct DistributedOptimizerOptions {
  bool zero = false;     // ZeRO-1
  bool overlap = true;   // start buckets during backward (else all after it)
  int64_t bucket_bytes = 4 << 20;
  std::function<void(const CommEvent&)> on_comm;  // optional trace sink
  // The tensor-parallel group when the parameters are tp slices (null: none). The gradient
  // norm and LAMB's per-parameter norms then sum the slices over tp, counting replicated
  // tensors once; gradients are still reduced over dp only.
  comm::Communicator* tp = nullptr;
  // The pipeline group when each rank holds some stages' parameters (null: none): the gradient
  // norm then sums over pp too.
  comm::Communicator* pp = nullptr;
  // Expert parallelism, for the optimizer of the routed experts (reduced over their
  // expert-data-parallel group, which is then `dp`): the ep group, whose ranks hold different
  // experts, so the gradient norm sums over it too; and the data-parallel size the summed
  // gradients are averaged over (every dp rank's tokens reach the experts). 0: dp's size.
  comm::Communicator* ep = nullptr;
  int average_over = 0;
  // The device the gradient norm and the updates run on (ops/backend.h); must outlive the
  // optimizer.
  ops::Backend* backend = &ops::cpu_backend();
  // Compressed communication (ZeRO-1 on the host only; parallel/compressed_dp.h). Tensors with
  // fewer than compress_min_numel values, 1-D tensors and routers are sent in f32.
  parallel::CompressConfig compress{};
  int64_t compress_min_numel = 4096;
  int64_t compress_reset_every = 0;  // every H-th step goes in full precision; 0: never
  // The node of every world rank (two-level compression and the inter-node byte count);
  // empty: one node.
  std::vector<int> node_of_world_rank{};
  // After each update, compare a CRC-32C of every dp replica's parameters.
  bool check_replicas = false;
};

class DistributedOptimizer {
 public:
  // Collective over `dp` (kept by reference; must outlive this object). InvalidArgument naming
  // the parameter when a tensor is not f32 or grad's shape differs from value's.
  static Result<std::unique_ptr<DistributedOptimizer>> create(
      comm::Communicator& dp, std::vector<TrainableParam> params,
      const config::OptimConfig& optim, DistributedOptimizerOptions options);
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Starts step `step` (it keys compressed communication's rounding): zeroes every gradient and
  // the step's communication statistics. `full_precision`: this step's reduction and gather go
  // uncompressed, carrying every kept residual, so the parameters every replica holds after it
  // equal the master weights (the trainer asks for it on checkpoint steps).
  void begin_step(int64_t step = 0, bool full_precision = false);
  // The coming backward pass finishes this step's gradients: from now on on_grad_ready starts
  // reductions (when overlap is on).
  void arm() { armed_ = true; }
  // BackwardHooks: parameter `param`'s gradient is final / a chance to progress communication.
  // Errors are kept and returned by finish_reduction().
  void on_grad_ready(size_t param);
  void poll();
  // Issues every bucket not yet started, waits for all of them and disarms. After it, the
  // gradient buffer (plain DP) or the shard (ZeRO) holds the sum over ranks.
  Status finish_reduction();

  // Global L2 norm of the averaged gradient (sum / dp). Collective under ZeRO and over tp.
  Result<double> grad_norm();
  // The squared norm of the summed gradient over every group that holds a part of it (before
  // the division by dp): what grad_norm takes the root of, for combining two optimizers.
  Result<double> grad_sum_of_squares();
  // The data-parallel size gradients are averaged over.
  int average_over() const;
  // Applies one optimizer update with learning rate `lr`, gradients scaled by
  // clip_coefficient / dp, then (ZeRO) all-gathers the parameters. Collective.
  Status apply(double lr, double clip_coefficient);

  // With compressed weights, after a step whose update was skipped or compressed: gathers the
  // master shards in full precision, so every replica equals the master weights (before a
  // checkpoint). Collective; a no-op when they already are.
  Status sync_replicas();
  // Bytes compressed communication sent since the last take (zero when it is off).
  parallel::CompressedTraffic take_compressed_traffic();

  const FlatLayout& layout() const { return layout_; }
  Optimizer& optimizer() { return *optimizer_; }
  bool zero() const { return options_.zero; }
  // This rank's ZeRO segments (every parameter whole without ZeRO), aligned with the
  // optimizer's state buffers.
  const std::vector<ShardSegment>& owned_segments() const { return owned_; }
  const parallel::CommStats& step_stats() const { return stats_; }
  // The flat buffers, in the backend's device memory.
  std::span<const float> flat_values() const { return {values_.data(), values_.size()}; }
  std::span<const float> flat_grads() const { return {grads_.data(), grads_.size()}; }

 private:
  DistributedOptimizer(comm::Communicator& dp, FlatLayout layout,
                       DistributedOptimizerOptions options);
  Status adopt(std::vector<TrainableParam>& params);
  void init_zero_shard();
  std::vector<OptimSegment> optimizer_segments(const std::vector<TrainableParam>& params) const;
  // Sums per-parameter partial sums (2 per parameter, as LAMB's reducer gets them) over tp:
  // replicated parameters count once (tp rank 0's), slices add up. Deterministic.
  Status sum_over_tp(std::span<double> per_param_pairs) const;
  double partial_grad_sum_of_squares() const;

  struct InFlight;
  Status issue_ready_buckets();
  Status issue_bucket(size_t bucket);
  Status test_in_flight();
  void complete(InFlight& op);
  Status gather_parameters(bool compressed);
  Status create_compression(const std::vector<TrainableParam>& params);
  Status check_replicas(int64_t step);
  bool grads_compressed() const {
    return compressed_ != nullptr && compressed_->config().grads_on() && !full_step_;
  }

  comm::Communicator& dp_;
  FlatLayout layout_;
  DistributedOptimizerOptions options_;
  std::unique_ptr<Optimizer> optimizer_;
  // In the backend's device memory, where the updates run and the collectives read.
  ops::DeviceArray values_;
  ops::DeviceArray grads_;
  ops::DeviceArray master_;       // ZeRO: this rank's shard of the parameters
  ops::DeviceArray grad_shard_;   // ZeRO: this rank's reduced gradient shard
  std::vector<ShardSegment> owned_;
  std::vector<OptimSegment> segments_;
  std::vector<bool> tp_replicated_;  // per parameter
  std::vector<bool> norm_counted_;   // per parameter
  std::vector<int64_t> bucket_pending_;  // gradients not yet final, per bucket
  std::vector<InFlight> in_flight_;
  size_t next_bucket_ = 0;
  bool armed_ = false;
  Status deferred_;
  double first_issue_t_ = 0;
  double last_done_t_ = 0;
  parallel::CommStats stats_;
  std::unique_ptr<parallel::CompressedDataParallel> compressed_;
  int64_t step_ = 0;
  bool full_step_ = false;
  bool replicas_exact_ = true;  // every replica holds the master weights
};

}  // namespace ms::train
