// AdamW and LAMB over flat fp32 buffers. The optimizer never sees parameters as tensors: it
// updates a range of elements described by segments, each naming the parameter it belongs to.
// The same code therefore serves plain data parallelism (the range is every parameter) and
// ZeRO-1 (the range is this rank's shard of the flat parameter buffer, and a parameter may be
// split between ranks). LAMB's per-parameter norms are summed over the ranks that share a
// parameter through a caller-supplied reducer.
//
// AdamW follows PyTorch's torch.optim.AdamW (decoupled weight decay applied before the moment
// step; bias-corrected moments). LAMB follows You et al., "Large Batch Optimization for Deep
// Learning: Training BERT in 76 minutes": the bias-corrected Adam direction plus weight decay,
// scaled per parameter by the trust ratio ||w|| / ||update|| (1 when either norm is zero, and 1
// for parameters excluded from weight decay, as the paper's BERT recipe excludes norms and
// biases from layer adaptation). The element loops are the backend's (ops/optimizer.h); this
// class keeps the moments, the segments and the per-step scalars.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "ops/backend.h"
#include "ops/device_array.h"

namespace ms::train {

// `length` elements at `offset` of the optimizer's buffers (values, grads and state alike)
// belonging to parameter `param`.
struct OptimSegment {
  size_t param = 0;
  int64_t offset = 0;
  int64_t length = 0;
  bool weight_decay = true;
};

struct OptimStep {
  double lr = 0;
  double grad_scale = 1.0;  // every gradient is multiplied by this (1/dp, clipping)
};

// Sums, in place, per-parameter partial sums over every rank holding part of the parameters;
// the identity when this rank holds whole parameters.
using PartialSumReducer = std::function<Status(std::span<double>)>;

class Optimizer {
 public:
  // An optimizer for buffers of `numel` elements covering parts of `num_params` parameters;
  // the moments start at zero. Hyper-parameters come from `optim` (name, betas, eps,
  // weight_decay). The updates run on `backend` (the host's by default), which must outlive
  // the optimizer. InvalidArgument when betas does not hold exactly two values.
  static Result<std::unique_ptr<Optimizer>> create(const config::OptimConfig& optim, int64_t numel,
                                                   size_t num_params,
                                                   ops::Backend* backend = &ops::cpu_backend());

  // One update of `values` from `grads` (both `numel` elements on the backend's device) over
  // `segments` (elements no
  // segment covers are left alone). LAMB calls `reduce` once, with 2 * num_params partial sums,
  // on every rank. Returns the reducer's error; the moments have then advanced without the
  // values, so the run must stop.
  Status step(std::span<float> values, std::span<const float> grads,
              std::span<const OptimSegment> segments, const OptimStep& hyper,
              const PartialSumReducer& reduce);

  // Updates applied so far (bias correction uses it); restored from checkpoints.
  int64_t updates() const { return updates_; }
  void set_updates(int64_t updates) { updates_ = updates; }
  // First and second moments, aligned with the value buffer, in the backend's device memory
  // (addresses on its device, as every pointer of the seam).
  std::span<float> exp_avg() { return {exp_avg_.data(), exp_avg_.size()}; }
  std::span<float> exp_avg_sq() { return {exp_avg_sq_.data(), exp_avg_sq_.size()}; }
  config::OptimizerKind kind() const { return kind_; }

 private:
  Optimizer(const config::OptimConfig& optim, int64_t numel, size_t num_params,
            ops::Backend* backend);

  ops::AdamCoefficients coefficients(const OptimStep& hyper) const;
  Status lamb_step(const ops::AdamCoefficients& c, std::span<float> values,
                   std::span<const float> grads, std::span<const OptimSegment> segments,
                   const PartialSumReducer& reduce);

  ops::Backend* be_;
  config::OptimizerKind kind_;
  double beta1_, beta2_, eps_, weight_decay_;
  size_t num_params_;
  int64_t updates_ = 0;
  // The state lives where the updates run: in the backend's device memory.
  ops::DeviceArray exp_avg_;
  ops::DeviceArray exp_avg_sq_;
  ops::DeviceArray direction_;  // LAMB scratch: the update before the trust ratio
};

}  // namespace ms::train
