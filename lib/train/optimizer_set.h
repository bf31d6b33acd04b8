// The trainer's distributed optimizers as one: without expert parallelism a single
// DistributedOptimizer over dp; with it (parallel.ep > 1) a second one for the routed experts'
// weights, reduced over their expert-data-parallel group (the ranks holding the same experts)
// and averaged over dp like the rest, since every dp rank's tokens reach them. The gradient
// norm is the norm of both together (the experts' part summed over ep). Parameters are
// addressed by their index in the trainer's list of all parameters, as the model's backward
// hooks name them.
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "config/run_config.h"
#include "core/status.h"
#include "ops/device_array.h"
#include "train/distributed_optimizer.h"

namespace ms::train {

// Which optimizer a parameter belongs to: the dense one (over dp), the routed experts' (over
// edp, with ep), or none (model.moe.expert_bias's routing bias, which the trainer moves; on a
// device the set keeps its value in device memory).
enum class ParamGroup { kDense, kExpert, kNotTrained };

class OptimizerSet {
 public:
  // One optimizer's share: its parameters' indices in the trainer's list, in its order.
  struct Part {
    std::unique_ptr<DistributedOptimizer> optimizer;
    std::vector<size_t> params;
    bool experts = false;  // the routed experts' optimizer
  };

  // `groups[i]` is params[i]'s group; with `edp` null every trained parameter goes to the dp
  // optimizer. A kNotTrained parameter is in no part and its on_grad_ready is ignored. `options` is each optimizer's base (ZeRO, overlap,
  // buckets, tp, pp, trace sink); the experts' also gets ep and average_over = dp's size.
  // Collective over dp and edp.
  static Result<std::unique_ptr<OptimizerSet>> create(
      comm::Communicator& dp, comm::Communicator* edp, comm::Communicator* ep,
      std::vector<TrainableParam> params, const std::vector<ParamGroup>& groups,
      const config::OptimConfig& optim, const DistributedOptimizerOptions& options);

  void begin_step(int64_t step, bool full_precision);
  void arm();
  void on_grad_ready(size_t param);
  void poll();
  Status finish_reduction();
  Result<double> grad_norm();
  Status apply(double lr, double clip_coefficient);
  // The step's dp (and edp) reduction statistics added up.
  parallel::CommStats step_stats() const;
  // DistributedOptimizer's, for every part.
  Status sync_replicas();
  parallel::CompressedTraffic take_compressed_traffic();

  std::vector<Part>& parts() { return parts_; }
  // The dense optimizer (the only one without ep): its update count is the run's.
  DistributedOptimizer& main() { return *parts_.front().optimizer; }

 private:
  std::vector<Part> parts_;
  // param -> (part, index in it); part kNoPart for a parameter no optimizer trains.
  static constexpr size_t kNoPart = static_cast<size_t>(-1);
  std::vector<std::pair<size_t, size_t>> slot_;
  // The untrained parameters' values on a device (keep_on_device); empty on the host.
  std::deque<ops::DeviceArray> untrained_;
  Status keep_on_device(TrainableParam& param, ops::Backend& be);
};

}  // namespace ms::train
