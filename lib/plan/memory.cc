// Per-rank memory of a layout; see memory.h.
#include "plan/memory.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "model/transformer.h"
#include "parallel/pp_placement.h"
#include "parallel/pp_schedule.h"
#include "parallel/tp_layout.h"
#include "parallel/tp_shards.h"
#include "train/layout_report.h"
#include "train/run_checks.h"

namespace ms::plan {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

bool is_routed_expert(const std::string& name) {
  return name.find(".experts.") != std::string::npos;
}

}  // namespace

namespace {

// The model's size keys and their values, for messages.
std::string model_keys_text(const config::RunConfig& c) {
  const config::ModelConfig& m = c.model;
  std::string text;
  for (const auto& [key, value] :
       {std::pair<const char*, int64_t>{"model.vocab_size", m.vocab_size},
        {"model.d_model", m.d_model},
        {"model.n_layers", m.n_layers},
        {"model.n_heads", m.n_heads},
        {"model.n_kv_heads", m.n_kv_heads},
        {"model.d_ff", m.d_ff},
        {"model.moe.num_experts", m.moe.num_experts},
        {"model.moe.top_k", m.moe.top_k},
        {"model.moe.shared_expert_d_ff", m.moe.shared_expert_d_ff},
        {"train.micro_batch", c.train.micro_batch},
        {"train.seq_len", c.train.seq_len}}) {
    text += (text.empty() ? "" : ", ") + std::string(key) + " " + std::to_string(value);
  }
  return text;
}

std::string bytes_text(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", bytes);
  return buf;
}

}  // namespace

Status check_model_fits_planner(const config::RunConfig& c) {
  const config::ModelConfig& m = c.model;
  const double V = static_cast<double>(m.vocab_size), D = static_cast<double>(m.d_model),
               L = static_cast<double>(m.n_layers), H = static_cast<double>(m.n_heads),
               KV = static_cast<double>(m.n_kv_heads), F = static_cast<double>(m.d_ff),
               E = static_cast<double>(m.moe.num_experts), K = static_cast<double>(m.moe.top_k),
               S = static_cast<double>(m.moe.shared_expert_d_ff);
  const double tensors = L * (3 * E + 16);
  if (!(tensors <= kMaxPlannedTensors)) {
    return InvalidArgument(model_keys_text(c) + ": the model has " + bytes_text(tensors) +
                           " tensors (model.n_layers x (3 model.moe.num_experts + 16)), more "
                           "than the planner enumerates (" +
                           bytes_text(kMaxPlannedTensors) + ")");
  }
  const double hd = D / std::max(1.0, H);
  const double ffn_params = E > 0 ? E * 3 * D * F + D * E + 3 * D * S : 3 * D * F;
  const double params = L * (D * hd * (2 * H + 2 * KV) + ffn_params + 2 * D) + 2 * V * D + D;
  // model::activation_bytes_of at tp 1 with every layer kept (no recompute), plus the logits.
  const double N = static_cast<double>(c.train.micro_batch) * static_cast<double>(c.train.seq_len);
  const double T = static_cast<double>(c.train.seq_len);
  const double ffn_acts =
      E > 0 ? N * (E + K + 2 * K * F + K * D + 2 * S + 4 * K * F + 3 * K * D) : 6 * N * F;
  const double layer_acts = N * (2 * H + 2 * KV) * hd + N * H * T + ffn_acts + 6 * N * D;
  const double activations = 4 * (L * layer_acts + N * V + 4 * N * D);
  // Weights, gradients and two moments in f32 (16 bytes per parameter), and the activations.
  const double bytes = 16 * params + activations;
  if (bytes <= kMaxPlannedBytes) return Status::OK();
  return InvalidArgument(model_keys_text(c) +
                         ": the model and one micro-batch's activations "
                         "come to " +
                         bytes_text(bytes) + " bytes at tp 1, above the " +
                         bytes_text(kMaxPlannedBytes) +
                         " the planner sizes; lower the largest "
                         "of these keys");
}

Result<std::vector<RankElements>> rank_elements(const config::RunConfig& config, const Layout& l) {
  const config::RunConfig c = apply_layout(config, l);
  std::vector<RankElements> out(static_cast<size_t>(l.pp));
  MS_ASSIGN_OR_RETURN(const std::vector<model::ParameterSpec> specs,
                      model::parameter_specs(c.model));
  for (const model::ParameterSpec& p : specs) {
    MS_ASSIGN_OR_RETURN(const comm::ShardSpec shard,
                        parallel::tp_shard(p.name, p.global_shape, l.tp, 0));
    std::vector<int> ranks = {0};
    if (l.pp > 1 || l.vpp > 1) {
      MS_ASSIGN_OR_RETURN(
          ranks, parallel::pp_ranks_holding(p.name, c.model.n_layers, c.model.tie_embeddings, l.pp,
                                            l.vpp, c.parallel.pp_layers));
    }
    for (int r : ranks) {
      if (is_routed_expert(p.name)) {
        out[static_cast<size_t>(r)].expert += shard.numel() / l.ep;
      } else {
        out[static_cast<size_t>(r)].dense += shard.numel();
      }
    }
  }
  return out;
}

namespace {

// Zero-bubble defers each linear layer's weight-gradient GEMM dW += dy^T x with copies of x and
// dy (model/model_impl.h, DeferredGemm) until its W pass: per layer and micro-batch, the inputs
// of q, k, v, o, gate, up and down and their output gradients, and lm_head's on the last stage.
// Routed experts compute their weight gradients at once and keep nothing.
double deferred_weight_grad_bytes(const config::RunConfig& c, const Layout& l,
                                  const train::PipelineLayout& pipeline, int r) {
  if (l.schedule != "zero-bubble") return 0;
  const config::ModelConfig& m = c.model;
  const double N = static_cast<double>(l.micro_batch * c.train.seq_len / l.cp),
               D = static_cast<double>(m.d_model);
  const double hd = static_cast<double>(m.d_model / m.n_heads);
  const double q = static_cast<double>(m.n_heads / l.tp) * hd,
               kv = static_cast<double>(m.n_kv_heads / l.tp) * hd;
  const double ff = m.moe.num_experts > 0 ? static_cast<double>(m.moe.shared_expert_d_ff / l.tp)
                                          : static_cast<double>(m.d_ff / l.tp);
  const double per_layer = N * (4 * D + 2 * q + 2 * kv + (ff > 0 ? 3 * D + 3 * ff : 0));
  double floats = 0;
  const size_t stages = pipeline.stages.size();
  for (size_t s = static_cast<size_t>(r); s < stages; s += static_cast<size_t>(l.pp)) {
    floats += per_layer * static_cast<double>(pipeline.stages[s].count);
    if (s + 1 == stages) {
      floats += N * (D + static_cast<double>(parallel::padded_vocab(m.vocab_size, l.tp) / l.tp));
    }
  }
  return 4.0 * floats;
}

// Activation bytes of pipeline rank r: its chunks' activation_bytes_of, times the micro-batches
// in flight, as the trainer's start-up line counts them.
Result<double> activation_bytes(const config::RunConfig& c, const Layout& l,
                                const train::PipelineLayout& pipeline, int r) {
  const config::ModelConfig& m = c.model;
  MS_ASSIGN_OR_RETURN(const parallel::VocabShard vocab,
                      parallel::vocab_shard(m.vocab_size, l.tp, 0));
  model::ActivationDims dims{.tp = l.tp,
                             .sequence_parallel = l.sequence_parallel,
                             .heads = m.n_heads / l.tp,
                             .kv_heads = m.n_kv_heads / l.tp,
                             .d_ff = m.d_ff / l.tp,
                             .shared_d_ff = m.moe.shared_expert_d_ff / l.tp,
                             .vocab_rows = std::max<int64_t>(0, vocab.real_end() - vocab.begin),
                             .recompute = l.recompute,
                             .layers = 0,
                             .last_chunk = false};
  const size_t stages = pipeline.stages.size();
  double total = 0, largest = 0;
  for (size_t s = static_cast<size_t>(r); s < stages; s += static_cast<size_t>(l.pp)) {
    dims.layers = pipeline.stages[s].count;
    dims.last_chunk = s + 1 == stages;
    // A cp rank holds T / cp tokens of each sequence (the trainer's start-up line counts them so).
    const double chunk = static_cast<double>(
        model::activation_bytes_of(m, dims, l.micro_batch, c.train.seq_len / l.cp));
    total += chunk;
    largest = std::max(largest, chunk);
  }
  if (l.pp == 1) return total;
  // pp_peak_in_flight counts (micro-batch, chunk) pairs between forward and backward, each
  // holding one chunk's activations: the largest chunk's, to stay on the safe side. (The
  // trainer's start-up line multiplies the sum over chunks instead, which over-counts by up to
  // vpp under the interleaved schedule.)
  const double per_pair = l.vpp > 1 ? largest : total;
  const double deferred = deferred_weight_grad_bytes(c, l, pipeline, r);
  if (deferred == 0) return per_pair * parallel::pp_peak_in_flight(pipeline.schedule, r);
  // Zero-bubble: a pair's activations go at its input-gradient pass, its weight-gradient
  // operands at its (deferred) weight pass, which the schedule may hold back for several
  // micro-batches to fill the bubbles; the peak is over the rank's own action order.
  MS_ASSIGN_OR_RETURN(const std::vector<parallel::PpAction> actions,
                      parallel::pp_schedule(pipeline.schedule, r));
  int forwards = 0, weights_pending = 0;
  double peak = 0;
  for (const parallel::PpAction& a : actions) {
    if (a.op == parallel::PpOp::kForward) ++forwards;
    if (a.op == parallel::PpOp::kBackward || a.op == parallel::PpOp::kBackwardInput) {
      --forwards;
      if (a.op == parallel::PpOp::kBackwardInput) ++weights_pending;
    }
    if (a.op == parallel::PpOp::kBackwardWeight) --weights_pending;
    peak = std::max(peak, per_pair * forwards + deferred * weights_pending);
  }
  return peak;
}

}  // namespace

Result<std::vector<RankMemory>> rank_memory(const config::RunConfig& config, const Layout& l,
                                            const std::vector<RankElements>& elements, int bytes,
                                            double overhead_mib) {
  const config::RunConfig c = apply_layout(config, l);
  MS_ASSIGN_OR_RETURN(const train::PipelineLayout pipeline, train::check_pipeline(c, l.dp));
  if (elements.size() != static_cast<size_t>(l.pp)) {
    return InvalidArgument("rank_memory: elements for " + std::to_string(elements.size()) +
                           " pipeline ranks, layout has " + std::to_string(l.pp));
  }
  std::vector<RankMemory> out(static_cast<size_t>(l.pp));
  // Gradients are reduced, and ZeRO-1 shards, over dp x cp (the trainer's dp_cp group); expert
  // weights are replicated over dp x cp / ep (ep folds over dp x cp).
  const int dpc = l.dp * l.cp;
  const int edp = std::max(1, dpc / l.ep);
  for (int r = 0; r < l.pp; ++r) {
    RankMemory& m = out[static_cast<size_t>(r)];
    m.pp_rank = r;
    m.dense_elements = elements[static_cast<size_t>(r)].dense;
    m.expert_elements = elements[static_cast<size_t>(r)].expert;
    const train::RankMemoryPlan dense = train::rank_memory_plan(m.dense_elements, dpc, l.zero);
    const train::RankMemoryPlan expert = train::rank_memory_plan(m.expert_elements, edp, l.zero);
    const double f32_weights = dense.weights_mib + expert.weights_mib;
    m.weights_mib = f32_weights * bytes / 4.0;
    // ZeRO-1 also holds the reduced shard of the gradients (DistributedOptimizer's grad_shard_),
    // 1/(dp cp) of them, which rank_memory_plan (and so the trainer's start-up line) leaves out.
    m.gradients_mib = dense.gradients_mib + expert.gradients_mib;
    if (l.zero) m.gradients_mib += dense.gradients_mib / dpc + expert.gradients_mib / edp;
    m.optimizer_mib = dense.optimizer_mib + expert.optimizer_mib;
    if (bytes == 2) {
      // Mixed precision: an f32 master copy beside the bf16 weights, in the optimizer state
      // (sharded with it under ZeRO-1; rank_memory_plan's ZeRO figure already counts it).
      if (!l.zero) m.optimizer_mib += f32_weights;
    }
    MS_ASSIGN_OR_RETURN(const double acts, activation_bytes(c, l, pipeline, r));
    m.activations_mib = acts * bytes / 4.0 / kMiB;
    m.overhead_mib = overhead_mib;
  }
  return out;
}

const RankMemory& peak_rank(const std::vector<RankMemory>& ranks) {
  return *std::max_element(
      ranks.begin(), ranks.end(),
      [](const RankMemory& a, const RankMemory& b) { return a.total_mib() < b.total_mib(); });
}

}  // namespace ms::plan
