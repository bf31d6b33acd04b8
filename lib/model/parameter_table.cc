// The parameter table: every parameter's name, global shape, this rank's shard (tp slice, ep
// experts, pp chunk) and its initialization (Philox keyed by the global element index, so every
// layout starts from the same model); parameter_specs lists it without allocating.
#include <string>
#include <vector>

#include "core/philox.h"
#include "model/model_impl.h"
#include "parallel/tp_shards.h"

namespace ms::model {

using config::ModelConfig;

namespace {

// kZeros: a routing bias (model.moe.expert_bias), the one tensor the optimizer does not train.
enum class Init { kNormal, kOutputProjection, kOnes, kZeros };

// Fills `value`, the slice `shard` of a global tensor, with the global tensor's values there:
// Philox keyed by (seed, name, global element index), so every layout initializes the same
// model. A box is filled one contiguous run of its last dimension at a time.
void fill_shard(Tensor& value, const comm::ShardSpec& shard, uint64_t seed, uint64_t stream,
                float std) {
  std::span<float> out = value.span<float>();
  const std::vector<int64_t>& global = shard.global_shape();
  if (global.size() != 2 || shard.is_replicated()) {
    fill_normal(out, seed, stream, 0, 0.0f, std);
    return;
  }
  const int64_t rows = shard.lengths()[0], cols = shard.lengths()[1];
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = (shard.offsets()[0] + r) * global[1] + shard.offsets()[1];
    fill_normal(out.subspan(static_cast<size_t>(r * cols), static_cast<size_t>(cols)), seed,
                stream, static_cast<uint64_t>(first), 0.0f, std);
  }
}

// Adds one parameter, this tp rank's slice of it (parallel/tp_shards.h), initialized from
// Philox keyed by (seed, name, global element index).
Result<size_t> add_parameter(std::vector<Parameter>& params, std::string name,
                             std::vector<int64_t> shape, Init init, uint64_t seed,
                             int64_t n_layers, int tp, int tp_rank, ParameterValues values) {
  MS_ASSIGN_OR_RETURN(comm::ShardSpec shard, parallel::tp_shard(name, shape, tp, tp_rank));
  Tensor value = Tensor::empty(DType::kF32, shard.lengths());
  if (init == Init::kOnes || init == Init::kZeros) {
    value.fill(init == Init::kOnes ? 1.0f : 0.0f);
  } else if (values == ParameterValues::kRandom) {
    const double scale = init == Init::kOutputProjection ? 1.0 / std::sqrt(2.0 * n_layers) : 1.0;
    fill_shard(value, shard, seed, stream_id(name), static_cast<float>(0.02 * scale));
  }
  Tensor grad = values == ParameterValues::kRandom ? Tensor::zeros(DType::kF32, shard.lengths())
                                                   : Tensor();
  const bool plain = init != Init::kOnes && init != Init::kZeros;
  params.push_back(Parameter{std::move(name), std::move(shape), std::move(shard),
                             std::move(value), std::move(grad), plain, init != Init::kZeros});
  return params.size() - 1;
}

// The parameter table under construction: where the parameters go and the layout they are
// sliced for.
struct Builder {
  std::vector<Parameter>& params;
  uint64_t seed = 0;
  ParameterValues values = ParameterValues::kRandom;
  int64_t n_layers = 1;
  int tp = 1, tp_rank = 0;
  int64_t first_expert = 0, local_experts = -1;  // -1: every expert
  bool whole_experts = false;  // parallel.expert_tp false: experts not split over tp
  Status status;
  std::vector<ParameterSpec>* specs = nullptr;  // set: list names and shapes, allocate nothing

  // Adds a parameter (see add_parameter); after a failure, adds nothing and returns kNoParam.
  size_t add(std::string name, std::vector<int64_t> shape, Init init, bool whole = false) {
    if (specs != nullptr) {
      specs->push_back({std::move(name), std::move(shape), init == Init::kOnes,
                        init != Init::kZeros});
      return specs->size() - 1;
    }
    if (!status.ok()) return kNoParam;
    Result<size_t> index = add_parameter(params, std::move(name), std::move(shape), init, seed,
                                         n_layers, whole ? 1 : tp, whole ? 0 : tp_rank, values);
    if (!index.ok()) {
      status = index.status();
      return kNoParam;
    }
    return *index;
  }
};

// The parameters of one SwiGLU feed-forward, under `prefix` with the given names.
// whole: not split over tp (routed experts under parallel.expert_tp false).
MlpIndex add_mlp(Builder& b, const std::string& prefix, const char* gate, const char* up,
                 const char* down, int64_t d, int64_t f, bool whole = false) {
  MlpIndex m;
  m.gate = b.add(prefix + gate + ".weight", {f, d}, Init::kNormal, whole);
  m.up = b.add(prefix + up + ".weight", {f, d}, Init::kNormal, whole);
  m.down = b.add(prefix + down + ".weight", {d, f}, Init::kOutputProjection, whole);
  return m;
}

void add_attention(Builder& b, LayerIndex& li, const std::string& prefix, const ModelConfig& c) {
  const int64_t hd = c.d_model / c.n_heads;
  const std::string a = prefix + "self_attn.";
  li.attn_norm = b.add(prefix + "input_layernorm.weight", {c.d_model}, Init::kOnes);
  li.q = b.add(a + "q_proj.weight", {c.n_heads * hd, c.d_model}, Init::kNormal);
  li.k = b.add(a + "k_proj.weight", {c.n_kv_heads * hd, c.d_model}, Init::kNormal);
  li.v = b.add(a + "v_proj.weight", {c.n_kv_heads * hd, c.d_model}, Init::kNormal);
  li.o = b.add(a + "o_proj.weight", {c.d_model, c.n_heads * hd}, Init::kOutputProjection);
}

void add_ffn(Builder& b, LayerIndex& li, const std::string& prefix, const ModelConfig& c) {
  const int64_t D = c.d_model;
  if (!c.parallel_block) {
    li.ffn_norm = b.add(prefix + "post_attention_layernorm.weight", {D}, Init::kOnes);
  }
  if (c.moe.num_experts == 0) {
    li.mlp = add_mlp(b, prefix + "mlp.", "gate_proj", "up_proj", "down_proj", D, c.d_ff);
    return;
  }
  const std::string moe = prefix + "block_sparse_moe.";
  li.router = b.add(moe + "gate.weight", {c.moe.num_experts, D}, Init::kNormal);
  if (c.moe.expert_bias) {
    li.expert_bias = b.add(moe + "gate.e_score_correction_bias", {c.moe.num_experts}, Init::kZeros);
  }
  const int64_t first = b.first_expert;
  const int64_t count = b.local_experts < 0 ? c.moe.num_experts : b.local_experts;
  for (int64_t e = first; e < first + count; ++e) {
    li.experts.push_back(
        add_mlp(b, moe + "experts." + std::to_string(e) + ".", "w1", "w3", "w2", D, c.d_ff,
                b.whole_experts));
  }
  if (c.moe.shared_expert_d_ff > 0) {
    li.shared = add_mlp(b, prefix + "mlp.shared_expert.", "gate_proj", "up_proj", "down_proj", D,
                        c.moe.shared_expert_d_ff);
  }
}

}  // namespace

Status build_parameters(Transformer::Impl& m, uint64_t seed, ParameterValues values,
                        std::vector<ParameterSpec>* specs) {
  const ModelConfig& c = m.cfg;
  Builder b{m.params, seed, values, c.n_layers, m.tp.size, m.tp.rank, 0, -1, false,
            Status::OK(), specs};
  if (specs == nullptr && m.is_moe()) {
    b.first_expert = m.ep.first_expert;
    b.local_experts = m.ep.local_experts;
    b.whole_experts = m.tp.expert_tokens_split;
  }
  const PipelineChunk& chunk = m.chunk;
  if (chunk.first) {
    m.embed = b.add("model.embed_tokens.weight", {c.vocab_size, c.d_model}, Init::kNormal);
  }
  m.layers.resize(static_cast<size_t>(chunk.layers));
  for (int64_t i = 0; i < chunk.layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(chunk.first_layer + i) + ".";
    LayerIndex& li = m.layers[static_cast<size_t>(i)];
    li.first_param = m.params.size();
    add_attention(b, li, prefix, c);
    add_ffn(b, li, prefix, c);
    li.end_param = m.params.size();
  }
  if (!chunk.last) return b.status;
  m.final_norm = b.add("model.norm.weight", {c.d_model}, Init::kOnes);
  if (c.tie_embeddings && chunk.first) {
    m.lm_head = m.embed;
  } else if (c.tie_embeddings) {
    // The last stage's copy of the tied embedding: initialized like the first stage's.
    m.lm_head = b.add("model.embed_tokens.weight", {c.vocab_size, c.d_model}, Init::kNormal);
  } else {
    m.lm_head = b.add("lm_head.weight", {c.vocab_size, c.d_model}, Init::kNormal);
  }
  return b.status;
}


Result<std::vector<ParameterSpec>> parameter_specs(const ModelConfig& config) {
  MS_RETURN_IF_ERROR(validate_model_config(config));
  Transformer::Impl impl;
  impl.cfg = config;
  impl.chunk.layers = config.n_layers;
  std::vector<ParameterSpec> specs;
  MS_RETURN_IF_ERROR(build_parameters(impl, 0, ParameterValues::kRandom, &specs));
  return specs;
}

}  // namespace ms::model
