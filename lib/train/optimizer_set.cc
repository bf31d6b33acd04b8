// The trainer's distributed optimizers as one (optimizer_set.h).
#include "train/optimizer_set.h"

#include <cmath>
#include <utility>

namespace ms::train {

Result<std::unique_ptr<OptimizerSet>> OptimizerSet::create(
    comm::Communicator& dp, comm::Communicator* edp, comm::Communicator* ep,
    std::vector<TrainableParam> params, const std::vector<ParamGroup>& groups,
    const config::OptimConfig& optim, const DistributedOptimizerOptions& options) {
  auto set = std::make_unique<OptimizerSet>();
  const bool split = edp != nullptr;
  std::vector<TrainableParam> lists[2];
  set->parts_.resize(split ? 2 : 1);
  set->slot_.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    if (groups[i] == ParamGroup::kNotTrained) {
      set->slot_[i] = {kNoPart, 0};
      MS_RETURN_IF_ERROR(set->keep_on_device(params[i], *options.backend));
      continue;
    }
    const size_t part = split && groups[i] == ParamGroup::kExpert ? 1 : 0;
    set->slot_[i] = {part, lists[part].size()};
    set->parts_[part].params.push_back(i);
    lists[part].push_back(std::move(params[i]));
  }
  MS_ASSIGN_OR_RETURN(set->parts_[0].optimizer,
                      DistributedOptimizer::create(dp, std::move(lists[0]), optim, options));
  if (split) {
    DistributedOptimizerOptions expert = options;
    expert.ep = ep;
    expert.average_over = dp.size();
    set->parts_[1].experts = true;
    MS_ASSIGN_OR_RETURN(set->parts_[1].optimizer,
                        DistributedOptimizer::create(*edp, std::move(lists[1]), optim,
                                                     std::move(expert)));
  }
  return set;
}

// No optimizer adopts an untrained parameter (the routing bias), so its value moves to the
// backend's memory here, as DistributedOptimizer::adopt moves the others: the model then runs
// every op on it where it runs the rest. It has no gradient: the host tensor stays unused.
Status OptimizerSet::keep_on_device(TrainableParam& param, ops::Backend& be) {
  const Device device = be.runtime().device();
  if (device.is_host() || param.value->device() == device) return Status::OK();
  ops::DeviceArray& array = untrained_.emplace_back();
  array.resize(be, static_cast<size_t>(param.value->numel()));
  Tensor on_device = Tensor::view_of(DType::kF32, param.value->shape(), array.data(), device);
  MS_RETURN_IF_ERROR(be.runtime().copy(on_device, *param.value, be.stream())
                         .with_context("parameter " + param.name));
  *param.value = std::move(on_device);
  return Status::OK();
}

void OptimizerSet::begin_step(int64_t step, bool full_precision) {
  for (Part& p : parts_) p.optimizer->begin_step(step, full_precision);
}

Status OptimizerSet::sync_replicas() {
  for (Part& p : parts_) MS_RETURN_IF_ERROR(p.optimizer->sync_replicas());
  return Status::OK();
}

parallel::CompressedTraffic OptimizerSet::take_compressed_traffic() {
  parallel::CompressedTraffic total;
  for (Part& p : parts_) total.add(p.optimizer->take_compressed_traffic());
  return total;
}

void OptimizerSet::arm() {
  for (Part& p : parts_) p.optimizer->arm();
}

void OptimizerSet::on_grad_ready(size_t param) {
  const auto [part, index] = slot_[param];
  if (part != kNoPart) parts_[part].optimizer->on_grad_ready(index);
}

void OptimizerSet::poll() {
  for (Part& p : parts_) p.optimizer->poll();
}

Status OptimizerSet::finish_reduction() {
  for (Part& p : parts_) MS_RETURN_IF_ERROR(p.optimizer->finish_reduction());
  return Status::OK();
}

Result<double> OptimizerSet::grad_norm() {
  if (parts_.size() == 1) return parts_[0].optimizer->grad_norm();
  double sum_sq = 0;
  for (Part& p : parts_) {
    MS_ASSIGN_OR_RETURN(const double part, p.optimizer->grad_sum_of_squares());
    sum_sq += part;
  }
  return std::sqrt(sum_sq) / static_cast<double>(parts_[0].optimizer->average_over());
}

Status OptimizerSet::apply(double lr, double clip_coefficient) {
  for (Part& p : parts_) MS_RETURN_IF_ERROR(p.optimizer->apply(lr, clip_coefficient));
  return Status::OK();
}

parallel::CommStats OptimizerSet::step_stats() const {
  parallel::CommStats total;
  for (const Part& p : parts_) total.add(p.optimizer->step_stats());
  return total;
}

}  // namespace ms::train
