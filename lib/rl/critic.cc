#include "rl/critic.h"

#include <algorithm>
#include <string>

#include "ops/rmsnorm.h"

namespace ms::rl {
namespace {

model::Parameter head_parameter(std::string name, int64_t size, bool weight_decay) {
  const std::vector<int64_t> shape = {size};
  return model::Parameter{std::move(name), shape, comm::ShardSpec::replicated(shape),
                          Tensor::zeros(DType::kF32, shape), Tensor::zeros(DType::kF32, shape),
                          weight_decay};
}

}  // namespace

Result<std::unique_ptr<Critic>> Critic::create(const model::Transformer& actor,
                                               comm::Communicator* tp) {
  const config::ModelConfig& config = actor.config();
  std::unique_ptr<Critic> critic(new Critic());
  model::ModelParallel trunk_only;
  trunk_only.chunk = model::PipelineChunk{0, -1, /*first=*/true, /*last=*/false};
  // Without sequence parallelism the trunk's output is the whole (B*T, D) residual stream on
  // every tp rank, as the head needs it.
  trunk_only.tp = tp;
  trunk_only.sequence_parallel = false;
  // The seed only fills values the copy below overwrites.
  MS_ASSIGN_OR_RETURN(critic->trunk_, model::Transformer::create(config, 0, trunk_only));
  for (model::Parameter& p : critic->trunk_->parameters()) {
    MS_ASSIGN_OR_RETURN(const size_t i, actor.parameter_index(p.name));
    const model::Parameter& from = actor.parameters()[i];
    if (!(from.shard == p.shard)) {
      return Internal("critic parameter " + p.name + " does not match the actor's slice");
    }
    std::copy_n(from.value.data<float>(), p.value.numel(), p.value.data<float>());
  }
  critic->d_model_ = config.d_model;
  critic->norm_eps_ = static_cast<float>(config.norm_eps);
  critic->head_.push_back(head_parameter("value_head.norm.weight", config.d_model, false));
  critic->head_.push_back(head_parameter("value_head.score.weight", config.d_model, true));
  critic->head_.push_back(head_parameter("value_head.score.bias", 1, false));
  MS_ASSIGN_OR_RETURN(const size_t norm, actor.parameter_index("model.norm.weight"));
  std::copy_n(actor.parameters()[norm].value.data<float>(), config.d_model,
              critic->head_[0].value.data<float>());
  return critic;
}

std::vector<model::Parameter*> Critic::parameters() {
  std::vector<model::Parameter*> out;
  for (model::Parameter& p : trunk_->parameters()) out.push_back(&p);
  for (model::Parameter& p : head_) out.push_back(&p);
  return out;
}

Result<Critic::HeadPass> Critic::forward(const PackedSamples& p, bool backward) {
  const int64_t D = d_model_;
  hidden_.resize(static_cast<size_t>(p.B * p.T * D));
  model::StageBatch batch;
  batch.inputs = p.inputs.data();
  batch.B = p.B;
  batch.T = p.T;
  batch.backward = backward;
  MS_RETURN_IF_ERROR(trunk_->stage_forward(0, batch, {}, hidden_).status());
  HeadPass h;
  const auto rows = static_cast<int64_t>(p.positions.size());
  h.rows.resize(static_cast<size_t>(rows * D));
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(hidden_.data() + p.positions[static_cast<size_t>(r)] * D, D,
                h.rows.data() + r * D);
  }
  h.normed.resize(h.rows.size());
  h.rstd.resize(static_cast<size_t>(rows));
  ops::rmsnorm_forward(h.rows.data(), head_[0].value.data<float>(), h.normed.data(),
                       h.rstd.data(), rows, D, norm_eps_);
  const float* w = head_[1].value.data<float>();
  const double bias = head_[2].value.data<float>()[0];
  for (int64_t r = 0; r < rows; ++r) {
    double v = bias;
    const float* n = h.normed.data() + r * D;
    for (int64_t k = 0; k < D; ++k) v += static_cast<double>(w[k]) * n[k];
    h.values.push_back(v);
  }
  return h;
}

Result<std::vector<double>> Critic::values(std::span<const Sample* const> samples,
                                           int64_t micro_batch, int32_t pad) {
  std::vector<double> out;
  MS_RETURN_IF_ERROR(for_each_micro_batch(samples, micro_batch, pad, trunk_->config().max_seq_len,
                                          [&](const PackedSamples& p) -> Status {
    MS_ASSIGN_OR_RETURN(const HeadPass h, forward(p, /*backward=*/false));
    out.insert(out.end(), h.values.begin(), h.values.end());
    return Status::OK();
  }));
  return out;
}

Status Critic::backward(std::span<const Sample* const> samples,
                        std::span<const double> grad_values, int64_t micro_batch, int32_t pad) {
  const int64_t D = d_model_;
  size_t next = 0;  // index into grad_values
  std::vector<float> d_normed, d_rows;
  MS_RETURN_IF_ERROR(for_each_micro_batch(samples, micro_batch, pad, trunk_->config().max_seq_len,
                                          [&](const PackedSamples& p) -> Status {
    const size_t rows = p.positions.size();
    if (next + rows > grad_values.size()) {
      return InvalidArgument("the value gradient has " + std::to_string(grad_values.size()) +
                             " entries, fewer than the samples' response tokens");
    }
    MS_ASSIGN_OR_RETURN(const HeadPass h, forward(p, /*backward=*/true));
    // v = w . n + b: dw += dv n, db += dv, dn = dv w; then the norm's backward to the rows.
    const float* w = head_[1].value.data<float>();
    float* dw = head_[1].grad.data<float>();
    float* db = head_[2].grad.data<float>();
    d_normed.assign(rows * static_cast<size_t>(D), 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      const auto dv = static_cast<float>(grad_values[next + r]);
      db[0] += dv;
      for (int64_t k = 0; k < D; ++k) {
        const size_t at = r * static_cast<size_t>(D) + static_cast<size_t>(k);
        dw[k] += dv * h.normed[at];
        d_normed[at] = dv * w[k];
      }
    }
    next += rows;
    d_rows.assign(d_normed.size(), 0.0f);
    ops::rmsnorm_backward(h.rows.data(), head_[0].value.data<float>(), h.rstd.data(),
                          d_normed.data(), d_rows.data(), head_[0].grad.data<float>(),
                          static_cast<int64_t>(rows), D);
    // The trunk's output gradient: the rows' gradients at their positions, 0 elsewhere.
    std::fill(hidden_.begin(), hidden_.end(), 0.0f);
    for (size_t r = 0; r < rows; ++r) {
      std::copy_n(d_rows.data() + r * static_cast<size_t>(D), D,
                  hidden_.data() + p.positions[r] * D);
    }
    return trunk_->stage_backward(0, hidden_, {});
  }));
  if (next != grad_values.size()) {
    return InvalidArgument("the value gradient has " + std::to_string(grad_values.size()) +
                           " entries, more than the samples' response tokens (" +
                           std::to_string(next) + ")");
  }
  return Status::OK();
}

}  // namespace ms::rl
