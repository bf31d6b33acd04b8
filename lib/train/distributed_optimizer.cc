// Bucketed gradient reduction, ZeRO-1 sharding and the optimizer update; see
// distributed_optimizer.h for the design.
#include "train/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/crc32c.h"
#include "core/logging.h"
#include "core/timer.h"
#include "train/rank_sum.h"

namespace ms::train {

struct DistributedOptimizer::InFlight {
  comm::Request request;
  CommEvent event;
};

Result<std::unique_ptr<DistributedOptimizer>> DistributedOptimizer::create(
    comm::Communicator& dp, std::vector<TrainableParam> params, const config::OptimConfig& optim,
    DistributedOptimizerOptions options) {
  // dp's collectives read and write the flat buffers where the backend keeps them (tp, pp
  // and ep only sum host scalars: norms).
  MS_RETURN_IF_ERROR(comm::check_memory(&dp, options.backend->runtime().device(),
                                        "the optimizer's flat buffers"));
  std::vector<int64_t> numels;
  numels.reserve(params.size());
  for (const TrainableParam& p : params) numels.push_back(p.value->numel());
  MS_ASSIGN_OR_RETURN(FlatLayout layout, FlatLayout::build(numels, dp.size(), options.bucket_bytes));
  std::unique_ptr<DistributedOptimizer> self(
      new DistributedOptimizer(dp, std::move(layout), std::move(options)));
  MS_RETURN_IF_ERROR(self->adopt(params));
  self->segments_ = self->optimizer_segments(params);
  for (const TrainableParam& p : params) {
    self->tp_replicated_.push_back(p.tp_replicated);
    self->norm_counted_.push_back(p.norm_counted);
  }
  const int64_t state_numel =
      self->options_.zero ? self->layout_.shard_numel() : self->layout_.total_numel();
  MS_ASSIGN_OR_RETURN(self->optimizer_, Optimizer::create(optim, state_numel, params.size(),
                                                          self->options_.backend));
  MS_RETURN_IF_ERROR(self->create_compression(params));
  return self;
}

namespace {

// Whether a tensor's gradient and weights are worth quantizing: not a small one, a 1-D one
// (norms, biases) or a router, whose bytes are few and whose precision matters most.
bool worth_compressing(const TrainableParam& p, int64_t min_numel) {
  return p.value->numel() >= min_numel && p.value->shape().size() >= 2 &&
         p.name.find("router") == std::string::npos;
}

// The runs of each part of `bucket`: the compressed tensors' stretches and the rest (f32
// tensors and padding), relative to the part's start.
parallel::CompressedBucket bucket_runs(const FlatLayout& layout, const GradBucket& bucket,
                                       const std::vector<bool>& compress) {
  parallel::CompressedBucket out;
  out.part_numel = bucket.numel / layout.dp();
  for (int r = 0; r < layout.dp(); ++r) {
    const int64_t begin = bucket.offset + r * out.part_numel, end = begin + out.part_numel;
    std::vector<parallel::WireRun> runs;
    auto add = [&](int64_t from, int64_t to, bool compressed) {
      from = std::max(from, begin);
      to = std::min(to, end);
      if (from >= to) return;
      if (!runs.empty() && runs.back().compressed == compressed &&
          runs.back().offset + runs.back().length == from - begin) {
        runs.back().length += to - from;
      } else {
        runs.push_back({from - begin, to - from, compressed});
      }
    };
    int64_t covered = bucket.offset;
    for (size_t param : bucket.params) {
      const int64_t at = layout.param_offset(param);
      add(covered, at, false);  // padding, if any
      add(at, at + layout.param_numel(param), compress[param]);
      covered = at + layout.param_numel(param);
    }
    add(covered, bucket.offset + bucket.numel, false);
    out.part_runs.push_back(std::move(runs));
  }
  return out;
}

}  // namespace

Status DistributedOptimizer::create_compression(const std::vector<TrainableParam>& params) {
  const parallel::CompressConfig& c = options_.compress;
  if (!c.grads_on() && c.weight_bits == 0) return Status::OK();
  if (!options_.zero) {
    return InvalidArgument("compressed data-parallel communication needs ZeRO-1 "
                           "(parallel.zero: 1)");
  }
  if (!options_.backend->runtime().device().is_host()) {
    return FailedPrecondition("compressed data-parallel communication runs on the host only; "
                              "the model is on " +
                              device_name(options_.backend->runtime().device()) +
                              " (set parallel.compress.weights and .grads to none)");
  }
  std::vector<bool> compress;
  int64_t compressed_values = 0, total_values = 0;
  std::string raw_names;
  int raw = 0;
  for (const TrainableParam& p : params) {
    compress.push_back(worth_compressing(p, options_.compress_min_numel));
    total_values += p.value->numel();
    if (compress.back()) {
      compressed_values += p.value->numel();
    } else if (++raw <= 6) {
      raw_names += (raw_names.empty() ? "" : ", ") + p.name;
    }
  }
  std::vector<parallel::CompressedBucket> buckets;
  for (const GradBucket& b : layout_.buckets()) buckets.push_back(bucket_runs(layout_, b, compress));
  std::vector<int> nodes;
  for (int w : dp_.world_ranks()) {
    const size_t at = static_cast<size_t>(w);
    nodes.push_back(at < options_.node_of_world_rank.size() ? options_.node_of_world_rank[at] : 0);
  }
  MS_ASSIGN_OR_RETURN(compressed_, parallel::CompressedDataParallel::create(
                                       dp_, nodes, c, std::move(buckets)));
  if (dp_.rank() == 0 && dp_.world_ranks()[0] == 0) {
    const auto bits = [](int b) { return b == 0 ? std::string("f32") : "int" + std::to_string(b); };
    const int nodes = compressed_->nodes();
    const std::string grads =
        c.two_level ? "two-level (int8 within " + std::to_string(dp_.size() / nodes) +
                          " ranks, int" + std::to_string(c.inter_bits) + " across " +
                          std::to_string(nodes) + " nodes)"
                    : bits(c.grad_bits);
    const double share = total_values > 0 ? 100.0 * static_cast<double>(compressed_values) /
                                                static_cast<double>(total_values)
                                          : 0.0;
    MS_LOG(Info) << "dp compression over " << dp_.name() << ": grads " << grads << ", weights "
                 << bits(c.weight_bits)
                 << (c.weight_bits != 0 && !c.weight_diff ? " (naive: values, not differences)"
                                                          : "")
                 << "; " << params.size() - static_cast<size_t>(raw) << " of " << params.size()
                 << " tensors compressed (" << share << "% of values); " << raw << " in f32"
                 << (raw > 0 ? " (" + raw_names + (raw > 6 ? ", ..." : "") + ")" : "");
  }
  return Status::OK();
}

DistributedOptimizer::DistributedOptimizer(comm::Communicator& dp, FlatLayout layout,
                                           DistributedOptimizerOptions options)
    : dp_(dp), layout_(std::move(layout)), options_(std::move(options)) {}

DistributedOptimizer::~DistributedOptimizer() = default;

// Moves every parameter into the flat buffers and points the tensors at them.
Status DistributedOptimizer::adopt(std::vector<TrainableParam>& params) {
  ops::Backend& be = *options_.backend;
  const Device device = be.runtime().device();
  values_.zeroed(be, static_cast<size_t>(layout_.total_numel()));
  grads_.zeroed(be, static_cast<size_t>(layout_.total_numel()));
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& value = *params[i].value;
    Tensor& grad = *params[i].grad;
    if (value.dtype() != DType::kF32 || grad.dtype() != DType::kF32 ||
        value.shape() != grad.shape()) {
      return InvalidArgument("parameter " + params[i].name + ": value " + value.describe() +
                             " and gradient " + grad.describe() +
                             " must both be f32 of the same shape");
    }
    Tensor flat_value =
        Tensor::view_of(DType::kF32, value.shape(), values_.data() + layout_.param_offset(i),
                        device);
    // The model may have built its parameters on the host: the runtime's copy moves them.
    MS_RETURN_IF_ERROR(be.runtime().copy(flat_value, value, be.stream())
                           .with_context("parameter " + params[i].name));
    value = std::move(flat_value);
    grad = Tensor::view_of(DType::kF32, grad.shape(), grads_.data() + layout_.param_offset(i),
                           device);
  }
  if (options_.zero) {
    init_zero_shard();
  } else {
    for (size_t i = 0; i < params.size(); ++i) {
      owned_.push_back({i, 0, layout_.param_numel(i), layout_.param_offset(i),
                        layout_.param_offset(i)});
    }
  }
  return Status::OK();
}

// ZeRO: this rank's segments, and its master shard copied out of the flat parameters.
void DistributedOptimizer::init_zero_shard() {
  owned_ = layout_.shard_segments(dp_.rank());
  master_.zeroed(*options_.backend, static_cast<size_t>(layout_.shard_numel()));
  grad_shard_.zeroed(*options_.backend, master_.size());
  for (const GradBucket& b : layout_.buckets()) {
    const int64_t part = b.numel / layout_.dp();
    options_.backend->copy(values_.data() + b.offset + dp_.rank() * part,
                           master_.data() + b.shard_offset, part);
  }
}

std::vector<OptimSegment> DistributedOptimizer::optimizer_segments(
    const std::vector<TrainableParam>& params) const {
  std::vector<OptimSegment> segments;
  segments.reserve(owned_.size());
  for (const ShardSegment& s : owned_) {
    const int64_t offset = options_.zero ? s.shard_offset : s.flat_offset;
    segments.push_back({s.param, offset, s.length(), params[s.param].weight_decay});
  }
  return segments;
}

void DistributedOptimizer::begin_step(int64_t step, bool full_precision) {
  step_ = step;
  full_step_ = full_precision ||
               (options_.compress_reset_every > 0 && step % options_.compress_reset_every == 0);
  options_.backend->fill(grads_.data(), static_cast<int64_t>(grads_.size()), 0.0f);
  bucket_pending_.clear();
  for (const GradBucket& b : layout_.buckets()) {
    bucket_pending_.push_back(static_cast<int64_t>(b.params.size()));
  }
  next_bucket_ = 0;
  armed_ = false;
  deferred_ = Status::OK();
  stats_ = parallel::CommStats{};
  first_issue_t_ = last_done_t_ = 0;
}

void DistributedOptimizer::on_grad_ready(size_t param) {
  if (!armed_ || !options_.overlap || !deferred_.ok()) return;
  --bucket_pending_[layout_.bucket_of(param)];
  deferred_ = issue_ready_buckets();
}

void DistributedOptimizer::poll() {
  if (in_flight_.empty() || !deferred_.ok()) return;
  deferred_ = test_in_flight();
}

// Issues buckets in order for as long as the next one has all its gradients.
Status DistributedOptimizer::issue_ready_buckets() {
  while (next_bucket_ < bucket_pending_.size() && bucket_pending_[next_bucket_] <= 0) {
    MS_RETURN_IF_ERROR(issue_bucket(next_bucket_++));
  }
  return Status::OK();
}

Status DistributedOptimizer::issue_bucket(size_t bucket) {
  const GradBucket& b = layout_.buckets()[bucket];
  InFlight op;
  op.event.seq = dp_.next_seq();
  op.event.bytes = static_cast<uint64_t>(b.numel) * sizeof(float);
  op.event.t0 = wall_time_s();
  float* grads = grads_.data() + b.offset;
  if (grads_compressed()) {
    op.event.op = "reduce_scatter";
    MS_ASSIGN_OR_RETURN(op.request, compressed_->reduce_scatter(
                                        bucket, grads, grad_shard_.data() + b.shard_offset, step_));
  } else if (dp_.size() == 1 && compressed_ == nullptr) {
    // A group of one sums nothing: the reduction is a copy on the backend (the transport
    // would memcpy device memory on the host), recorded like the collective it stands for.
    op.event.op = options_.zero ? "reduce_scatter" : "allreduce";
    if (options_.zero) {
      options_.backend->copy(grads, grad_shard_.data() + b.shard_offset, b.numel);
    }
    if (stats_.collectives == 0) first_issue_t_ = op.event.t0;
    ++stats_.collectives;
    stats_.bytes += op.event.bytes;
    complete(op);
    return Status::OK();
  } else if (options_.zero) {
    // A full-precision step hands over what compression kept back.
    if (compressed_ != nullptr) compressed_->add_residuals(bucket, grads);
    op.event.op = "reduce_scatter";
    const size_t part = static_cast<size_t>(b.numel / layout_.dp());
    MS_ASSIGN_OR_RETURN(op.request,
                        dp_.ireduce_scatter(grads, grad_shard_.data() + b.shard_offset, part,
                                            DType::kF32, comm::ReduceOp::kSum));
  } else {
    op.event.op = "allreduce";
    MS_ASSIGN_OR_RETURN(op.request, dp_.iallreduce(grads, grads, static_cast<size_t>(b.numel),
                                                   DType::kF32, comm::ReduceOp::kSum));
  }
  if (stats_.collectives == 0) first_issue_t_ = op.event.t0;
  ++stats_.collectives;
  stats_.bytes += op.event.bytes;
  in_flight_.push_back(std::move(op));
  return Status::OK();
}

Status DistributedOptimizer::test_in_flight() {
  for (InFlight& op : in_flight_) {
    if (op.request.done()) continue;
    MS_ASSIGN_OR_RETURN(const bool finished, op.request.test());
    if (finished) complete(op);
  }
  return Status::OK();
}

// Records a finished gradient collective.
void DistributedOptimizer::complete(InFlight& op) {
  op.event.t1 = wall_time_s();
  last_done_t_ = std::max(last_done_t_, op.event.t1);
  if (options_.on_comm) options_.on_comm(op.event);
}

Status DistributedOptimizer::finish_reduction() {
  MS_RETURN_IF_ERROR(deferred_);
  std::fill(bucket_pending_.begin(), bucket_pending_.end(), 0);
  MS_RETURN_IF_ERROR(issue_ready_buckets());
  Stopwatch waiting;
  for (InFlight& op : in_flight_) {
    if (op.request.done()) continue;
    MS_RETURN_IF_ERROR(op.request.wait());
    complete(op);
  }
  stats_.exposed_s = waiting.elapsed_s();
  stats_.active_s = stats_.collectives > 0 ? last_done_t_ - first_issue_t_ : 0;
  in_flight_.clear();
  armed_ = false;
  return Status::OK();
}

Status DistributedOptimizer::sum_over_tp(std::span<double> sums) const {
  if (options_.tp == nullptr || options_.tp->size() == 1) return Status::OK();
  if (options_.tp->rank() != 0) {
    for (size_t p = 0; p < tp_replicated_.size(); ++p) {
      if (tp_replicated_[p]) sums[2 * p] = sums[2 * p + 1] = 0.0;
    }
  }
  return sum_in_rank_order(*options_.tp, sums);
}

// This rank's share of the squared gradient norm: with tp rank > 0 leaving out the replicated
// tensors, which tp rank 0 counts, and leaving out a pipeline stage's tied-embedding copy; in
// segment order, so the same on every run.
double DistributedOptimizer::partial_grad_sum_of_squares() const {
  const bool skip_replicated = options_.tp != nullptr && options_.tp->rank() != 0;
  const float* grads = options_.zero ? grad_shard_.data() : grads_.data();
  double sum = 0;
  for (const OptimSegment& seg : segments_) {
    if (skip_replicated && tp_replicated_[seg.param]) continue;
    if (!norm_counted_[seg.param]) continue;
    sum += options_.backend->sum_of_squares_f64(grads + seg.offset, seg.length);
  }
  return sum;
}

Result<double> DistributedOptimizer::grad_sum_of_squares() {
  const bool tp = options_.tp != nullptr && options_.tp->size() > 1;
  const bool pp = options_.pp != nullptr && options_.pp->size() > 1;
  const bool ep = options_.ep != nullptr && options_.ep->size() > 1;
  const ops::DeviceArray& grads = options_.zero ? grad_shard_ : grads_;
  double sum_sq = tp || pp ? partial_grad_sum_of_squares()
                           : options_.backend->sum_of_squares_f64(
                                 grads.data(), static_cast<int64_t>(grads.size()));
  if (options_.zero) MS_RETURN_IF_ERROR(sum_in_rank_order(dp_, std::span<double>(&sum_sq, 1)));
  if (tp) MS_RETURN_IF_ERROR(sum_in_rank_order(*options_.tp, std::span<double>(&sum_sq, 1)));
  if (pp) MS_RETURN_IF_ERROR(sum_in_rank_order(*options_.pp, std::span<double>(&sum_sq, 1)));
  if (ep) MS_RETURN_IF_ERROR(sum_in_rank_order(*options_.ep, std::span<double>(&sum_sq, 1)));
  return sum_sq;
}

int DistributedOptimizer::average_over() const {
  return options_.average_over > 0 ? options_.average_over : layout_.dp();
}

Result<double> DistributedOptimizer::grad_norm() {
  MS_ASSIGN_OR_RETURN(const double sum_sq, grad_sum_of_squares());
  return std::sqrt(sum_sq) / static_cast<double>(average_over());
}

Status DistributedOptimizer::apply(double lr, double clip_coefficient) {
  const OptimStep hyper{lr, clip_coefficient / static_cast<double>(average_over())};
  if (!options_.zero) {
    return optimizer_->step({values_.data(), values_.size()}, {grads_.data(), grads_.size()},
                            segments_, hyper,
                            [this](std::span<double> sums) { return sum_over_tp(sums); });
  }
  MS_RETURN_IF_ERROR(optimizer_->step(
      {master_.data(), master_.size()}, {grad_shard_.data(), grad_shard_.size()}, segments_,
      hyper, [this](std::span<double> sums) {
        MS_RETURN_IF_ERROR(sum_in_rank_order(dp_, sums));
        return sum_over_tp(sums);
      }));
  const bool compressed =
      compressed_ != nullptr && compressed_->config().weight_bits != 0 && !full_step_;
  MS_RETURN_IF_ERROR(gather_parameters(compressed));
  return options_.check_replicas ? check_replicas(step_) : Status::OK();
}

Status DistributedOptimizer::sync_replicas() {
  if (!options_.zero || replicas_exact_) return Status::OK();
  return gather_parameters(false);
}

parallel::CompressedTraffic DistributedOptimizer::take_compressed_traffic() {
  return compressed_ != nullptr ? compressed_->take_traffic() : parallel::CompressedTraffic{};
}

// ZeRO: every rank's updated shard of each bucket back into the flat parameter buffer (as
// quantized differences when `compressed`).
Status DistributedOptimizer::gather_parameters(bool compressed) {
  std::vector<InFlight> gathers;
  for (size_t i = 0; i < layout_.buckets().size(); ++i) {
    const GradBucket& b = layout_.buckets()[i];
    InFlight op;
    op.event = {"allgather", dp_.next_seq(), static_cast<uint64_t>(b.numel) * sizeof(float),
                wall_time_s(), 0};
    const size_t part = static_cast<size_t>(b.numel / layout_.dp());
    if (compressed) {
      MS_ASSIGN_OR_RETURN(op.request,
                          compressed_->gather_weights(i, master_.data() + b.shard_offset,
                                                      values_.data() + b.offset, step_));
    } else if (dp_.size() == 1) {
      // As issue_bucket: a group of one gathers by a copy on the backend.
      options_.backend->copy(master_.data() + b.shard_offset, values_.data() + b.offset,
                             static_cast<int64_t>(part));
    } else {
      MS_ASSIGN_OR_RETURN(op.request,
                          dp_.iallgather(master_.data() + b.shard_offset,
                                         values_.data() + b.offset, part, DType::kF32));
    }
    gathers.push_back(std::move(op));
  }
  for (InFlight& op : gathers) {
    MS_RETURN_IF_ERROR(op.request.wait());
    op.event.t1 = wall_time_s();
    if (options_.on_comm) options_.on_comm(op.event);
  }
  replicas_exact_ = !compressed;
  return Status::OK();
}

// Every dp rank's CRC-32C of its replicated parameters, compared.
Status DistributedOptimizer::check_replicas(int64_t step) {
  uint32_t mine = 0;
  if (options_.backend->runtime().device().is_host()) {
    mine = crc32c(values_.data(), values_.size() * sizeof(float));
  } else {
    // The host checksums a copy of device memory.
    std::vector<float> values(values_.size());
    MS_RETURN_IF_ERROR(values_.read(*options_.backend, 0, values));
    mine = crc32c(values.data(), values.size() * sizeof(float));
  }
  std::vector<uint32_t> all(static_cast<size_t>(dp_.size()));
  MS_RETURN_IF_ERROR(dp_.allgather(&mine, all.data(), 1, DType::kI32));
  for (int r = 1; r < dp_.size(); ++r) {
    if (all[r] != all[0]) {
      return Internal("dp replicas differ after step " + std::to_string(step) + ": rank " +
                      std::to_string(dp_.world_ranks()[r]) + " holds parameters with CRC-32C " +
                      std::to_string(all[r]) + ", rank " + std::to_string(dp_.world_ranks()[0]) +
                      " " + std::to_string(all[0]) + " (group " + dp_.name() + ")");
    }
  }
  return Status::OK();
}

}  // namespace ms::train
