// A pipeline-parallel training step (pipeline_step.h).
#include "train/pipeline_step.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <string>
#include <utility>

#include "core/timer.h"
#include "train/rank_sum.h"

namespace ms::train {
namespace {

// The embedding group's exchange happens after the schedule's last transfer completed, so it
// may use any tag; this one is outside the range the executor uses.
constexpr int kTiedEmbeddingTag = 32767;
// p2p trace events pair up by (group, seq): the step and the message tag (below 32768).
constexpr uint64_t kTagsPerStep = 32768;

const char* const kEmbedding = "model.embed_tokens.weight";

}  // namespace

Result<std::unique_ptr<PipelineStep>> PipelineStep::create(comm::Communicator& pp,
                                                           const parallel::PpScheduleShape& shape,
                                                           std::vector<model::Transformer*> chunks,
                                                           telemetry::TraceWriter* trace,
                                                           std::string trace_group) {
  MS_RETURN_IF_ERROR(parallel::check_pp_schedule(shape));
  if (static_cast<int>(chunks.size()) != shape.vpp || pp.size() != shape.pp) {
    return InvalidArgument("a pipeline rank needs parallel.vpp (" + std::to_string(shape.vpp) +
                           ") model chunks and a group of parallel.pp (" +
                           std::to_string(shape.pp) + ") ranks; it has " +
                           std::to_string(chunks.size()) + " and " + std::to_string(pp.size()));
  }
  std::unique_ptr<PipelineStep> step(new PipelineStep(pp, shape, std::move(chunks), trace));
  step->trace_group_ = std::move(trace_group);
  MS_ASSIGN_OR_RETURN(step->actions_, parallel::pp_schedule(shape, pp.rank()));
  return step;
}

Result<PipelineStepResult> PipelineStep::run(int64_t step,
                                             std::span<const data::MicroBatch> batches) {
  if (static_cast<int>(batches.size()) != shape_.micro_batches) {
    return InvalidArgument("a pipeline step of " + std::to_string(shape_.micro_batches) +
                           " micro-batches was given " + std::to_string(batches.size()));
  }
  PipelineStepResult result;
  const float grad_scale = 1.0f / static_cast<float>(shape_.micro_batches);
  const bool zero_bubble = shape_.kind == parallel::PpScheduleKind::kZeroBubble;
  const int64_t elements =
      chunks_[0]->stage_activation_elements(batches[0].rows, batches[0].seq_len);
  std::function<void()> progress;
  model::BackwardHooks hooks;
  hooks.poll = [&progress] {
    if (progress) progress();
  };
  const auto stage_of = [&](int chunk) { return chunk * shape_.pp + pp_.rank(); };
  const auto trace = [&](const char* op, int chunk, int mb, double t0, double t1) {
    if (trace_ != nullptr) trace_->compute(op, stage_of(chunk), mb, step, t0, t1);
  };
  double loss_sum = 0, aux_sum = 0, z_sum = 0;

  parallel::PpCallbacks callbacks;
  callbacks.forward = [&](int mb, int chunk, std::span<const float> input,
                          std::vector<float>& output) -> Status {
    model::Transformer& m = *chunks_[static_cast<size_t>(chunk)];
    const data::MicroBatch& b = batches[static_cast<size_t>(mb)];
    output.resize(m.chunk().last ? 0 : static_cast<size_t>(elements));
    if (forward_delay_s_ > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(forward_delay_s_));
    }
    const double t0 = wall_time_s();
    MS_ASSIGN_OR_RETURN(const model::LossStats stats,
                        m.stage_forward(mb, {b.inputs.data(), b.targets.data(), b.rows,
                                             b.seq_len, grad_scale, true},
                                        input, output));
    const double t1 = wall_time_s();
    result.fwd_s += t1 - t0;
    trace("fwd", chunk, mb, t0, t1);
    if (m.chunk().last) loss_sum += stats.loss;
    aux_sum += stats.aux_loss;
    z_sum += stats.z_loss;
    return Status::OK();
  };
  callbacks.backward = [&](int mb, int chunk, std::span<const float> grad_out,
                           std::vector<float>& grad_in) -> Status {
    model::Transformer& m = *chunks_[static_cast<size_t>(chunk)];
    grad_in.resize(m.chunk().first ? 0 : static_cast<size_t>(elements));
    const double t0 = wall_time_s();
    MS_RETURN_IF_ERROR(m.stage_backward(mb, grad_out, grad_in, zero_bubble, &hooks));
    const double t1 = wall_time_s();
    result.bwd_s += t1 - t0;
    trace(zero_bubble ? "bwd_input" : "bwd", chunk, mb, t0, t1);
    return Status::OK();
  };
  callbacks.backward_weight = [&](int mb, int chunk) -> Status {
    const double t0 = wall_time_s();
    MS_RETURN_IF_ERROR(chunks_[static_cast<size_t>(chunk)]->stage_backward_weight(mb));
    const double t1 = wall_time_s();
    result.bwd_s += t1 - t0;
    trace("bwd_weight", chunk, mb, t0, t1);
    return Status::OK();
  };

  parallel::PpExecutorOptions options;
  options.message_elements = elements;
  options.recv_window = 2 * shape_.vpp + 2;
  options.stats = &result.p2p;
  options.progress = &progress;
  if (trace_ != nullptr) {
    options.on_p2p = [this, step](const char* op, int tag, uint64_t bytes, double t0,
                                  double t1) {
      const uint64_t seq = static_cast<uint64_t>(step) * kTagsPerStep + static_cast<uint64_t>(tag);
      trace_->comm(op, trace_group_, seq, bytes, t0, t1);
    };
  }
  MS_RETURN_IF_ERROR(parallel::run_pp_schedule(pp_, shape_, actions_, callbacks, options));
  MS_RETURN_IF_ERROR(sum_tied_embedding());
  double shared[3] = {loss_sum, aux_sum, z_sum};
  MS_RETURN_IF_ERROR(sum_in_rank_order(pp_, std::span<double>(shared, 3)));
  result.loss = shared[0] / shape_.micro_batches;
  result.aux = shared[1] / shape_.micro_batches;
  result.z = shared[2] / shape_.micro_batches;
  return result;
}

Result<double> PipelineStep::evaluate(std::span<const data::MicroBatch> batches) {
  const int stages = shape_.pp * shape_.vpp, rank = pp_.rank();
  double loss_sum = 0;
  std::vector<float> input, output;
  for (size_t mb = 0; mb < batches.size(); ++mb) {
    const data::MicroBatch& b = batches[mb];
    const size_t elements =
        static_cast<size_t>(chunks_[0]->stage_activation_elements(b.rows, b.seq_len));
    const int tag = static_cast<int>(mb % static_cast<size_t>(kTiedEmbeddingTag));
    for (int s = 0; s < stages; ++s) {
      if (s % shape_.pp != rank) continue;
      model::Transformer& m = *chunks_[static_cast<size_t>(s / shape_.pp)];
      if (s > 0) {
        input.resize(elements);
        MS_RETURN_IF_ERROR(
            pp_.recv(input.data(), elements, DType::kF32, (s - 1) % shape_.pp, tag));
      }
      output.resize(m.chunk().last ? 0 : elements);
      MS_ASSIGN_OR_RETURN(const model::LossStats stats,
                          m.stage_forward(static_cast<int>(mb),
                                          {b.inputs.data(), b.targets.data(), b.rows, b.seq_len,
                                           0.0f, false},
                                          input, output));
      if (m.chunk().last) loss_sum += stats.loss;
      if (s + 1 < stages) {
        MS_RETURN_IF_ERROR(
            pp_.send(output.data(), elements, DType::kF32, (s + 1) % shape_.pp, tag));
      }
    }
  }
  MS_RETURN_IF_ERROR(sum_in_rank_order(pp_, std::span<double>(&loss_sum, 1)));
  return loss_sum / static_cast<double>(batches.size());
}

// With tied embeddings the first stage's embedding and the last stage's lm_head are copies of
// one tensor: each copy's gradient becomes their sum (first + last on both, so the same bits),
// and the copies stay equal through identical updates.
Status PipelineStep::sum_tied_embedding() {
  model::Transformer& first = *chunks_.front();
  model::Transformer& last = *chunks_.back();
  if (!first.config().tie_embeddings || shape_.pp == 1) return Status::OK();
  const bool holds_first = first.chunk().first, holds_last = last.chunk().last;
  if (!holds_first && !holds_last) return Status::OK();
  model::Transformer& holder = holds_first ? first : last;
  MS_ASSIGN_OR_RETURN(const size_t index, holder.parameter_index(kEmbedding));
  Tensor& grad = holder.parameters()[index].grad;
  const size_t n = static_cast<size_t>(grad.numel());
  const int peer = holds_first ? shape_.pp - 1 : 0;
  tied_peer_.resize(n);
  MS_ASSIGN_OR_RETURN(comm::Request recv, pp_.irecv(tied_peer_.data(), n, DType::kF32, peer,
                                                    kTiedEmbeddingTag));
  MS_ASSIGN_OR_RETURN(comm::Request send, pp_.isend(grad.data<float>(), n, DType::kF32, peer,
                                                    kTiedEmbeddingTag));
  MS_RETURN_IF_ERROR(recv.wait());
  MS_RETURN_IF_ERROR(send.wait());
  float* g = grad.data<float>();
  const int64_t count = static_cast<int64_t>(n);
  if (holds_first) {
    be_->add(g, tied_peer_.data(), g, count);
  } else {
    be_->add(tied_peer_.data(), g, g, count);
  }
  return Status::OK();
}

}  // namespace ms::train
