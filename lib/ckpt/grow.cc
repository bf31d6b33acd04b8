// Growing the tensors by the plan (the rules and their maths: grow.h).
#include "ckpt/grow.h"

#include <cmath>
#include <string>

#include "core/philox.h"

namespace ms::ckpt {
namespace {

// The standard deviation of the fresh values in a reader's new columns: the model's own
// initialization of matrices (model/parameter_table.cc).
constexpr float kFreshStd = 0.02f;

// One dimension of a grown tensor: for each grown index, the original index it copies (-1: a
// new coordinate of the hidden stream) and the factor it carries.
struct Axis {
  int64_t from = 0;  // the original dimension's size
  std::vector<int64_t> source;
  std::vector<float> scale;
  int64_t size() const { return static_cast<int64_t>(source.size()); }
};

Axis identity_axis(int64_t n) {
  Axis a;
  a.from = n;
  for (int64_t i = 0; i < n; ++i) {
    a.source.push_back(i);
    a.scale.push_back(1.0f);
  }
  return a;
}

// The hidden stream: the D original coordinates, then D' - D new ones.
Axis stream_axis(int64_t from, int64_t to) {
  Axis a = identity_axis(from);
  for (int64_t i = from; i < to; ++i) {
    a.source.push_back(-1);
    a.scale.push_back(1.0f);
  }
  return a;
}

// Units of `width` elements each (a head's rows or columns, one neuron): grown unit u copies
// unit copies[u].source, scaled by its share when `shared` (outgoing weights) else by 1.
Axis unit_axis(const std::vector<UnitCopy>& copies, int64_t sources, int64_t width,
               bool shared) {
  Axis a;
  a.from = sources * width;
  for (const UnitCopy& c : copies) {
    for (int64_t i = 0; i < width; ++i) {
      a.source.push_back(c.source * width + i);
      a.scale.push_back(shared ? c.share : 1.0f);
    }
  }
  return a;
}

// What a cell on a new coordinate of the stream holds: 0 for writers of the stream (and the
// router), fresh values for readers.
enum class NewCells { kZero, kFresh };

struct Grower {
  const GrowPlan& plan;
  const TensorCatalog& source;
  uint64_t seed;
  std::vector<GrownParameter> out;

  Result<Tensor> read(const std::string& name, std::vector<int64_t> shape) {
    const TensorInfo* info = source.find(name);
    if (info == nullptr) return NotFound("the checkpoint has no parameter \"" + name + "\"");
    if (info->shape != shape || info->dtype != DType::kF32) {
      return InvalidArgument("parameter \"" + name + "\" is " + std::string(dtype_name(info->dtype)) + " " +
                             shape_string(info->shape) + ", but the checkpoint's model config "
                             "implies f32 " + shape_string(shape));
    }
    return source.read(name);
  }

  // out[r, c] = in[rows.source[r], cols.source[c]] * rows.scale[r] * cols.scale[c], or the
  // new-cell value where either index is new. `zero` makes the whole tensor 0 (a new layer's
  // output projection).
  Status matrix(const std::string& to_name, const std::string& from_name, const Axis& rows,
                const Axis& cols, NewCells fill, bool zero = false) {
    const int64_t in_cols = cols.from;
    MS_ASSIGN_OR_RETURN(Tensor in, read(from_name, {rows.from, in_cols}));
    MS_ASSIGN_OR_RETURN(Tensor value,
                        allocate_tensor(DType::kF32, {rows.size(), cols.size()}, to_name));
    const float* src = in.data<float>();
    float* dst = value.data<float>();
    const uint64_t stream = stream_id(to_name);
    for (int64_t r = 0; r < rows.size(); ++r) {
      const int64_t sr = rows.source[static_cast<size_t>(r)];
      for (int64_t c = 0; c < cols.size(); ++c) {
        const int64_t sc = cols.source[static_cast<size_t>(c)];
        const int64_t at = r * cols.size() + c;
        float v = 0;
        if (zero) {
          v = 0;
        } else if (sr >= 0 && sc >= 0) {
          v = src[sr * in_cols + sc] * rows.scale[static_cast<size_t>(r)] *
              cols.scale[static_cast<size_t>(c)];
        } else if (fill == NewCells::kFresh) {
          v = kFreshStd * normal(seed, stream, static_cast<uint64_t>(at));
        }
        dst[at] = v;
      }
    }
    out.push_back({to_name, from_name, std::move(value)});
    return Status::OK();
  }

  // An RMSNorm weight over the grown stream: c g on the old coordinates, c on the new ones,
  // c = sqrt(D / D') (grow.h).
  Status norm(const std::string& to_name, const std::string& from_name) {
    const int64_t from = plan.from.d_model, to = plan.to.d_model;
    MS_ASSIGN_OR_RETURN(Tensor in, read(from_name, {from}));
    MS_ASSIGN_OR_RETURN(Tensor value, allocate_tensor(DType::kF32, {to}, to_name));
    const double c = std::sqrt(static_cast<double>(from) / static_cast<double>(to));
    const float* g = in.data<float>();
    float* dst = value.data<float>();
    for (int64_t i = 0; i < to; ++i) {
      dst[i] = to == from ? g[i] : static_cast<float>(c * (i < from ? g[i] : 1.0));
    }
    out.push_back({to_name, from_name, std::move(value)});
    return Status::OK();
  }

  Status copy(const std::string& to_name, const std::string& from_name,
              std::vector<int64_t> shape) {
    MS_ASSIGN_OR_RETURN(Tensor in, read(from_name, std::move(shape)));
    out.push_back({to_name, from_name, std::move(in)});
    return Status::OK();
  }

  // gate/up copy the neurons' rows together; down carries their shares (zero in a new layer).
  Status mlp(const std::string& to, const std::string& from, const char* gate, const char* up,
             const char* down, const std::vector<UnitCopy>& neurons, int64_t sources,
             bool inserted) {
    const Axis stream = stream_axis(plan.from.d_model, plan.to.d_model);
    const Axis in_rows = unit_axis(neurons, sources, 1, false);
    const Axis out_cols = unit_axis(neurons, sources, 1, true);
    MS_RETURN_IF_ERROR(matrix(to + gate + ".weight", from + gate + ".weight", in_rows, stream,
                              NewCells::kFresh));
    MS_RETURN_IF_ERROR(
        matrix(to + up + ".weight", from + up + ".weight", in_rows, stream, NewCells::kFresh));
    return matrix(to + down + ".weight", from + down + ".weight", stream, out_cols,
                  NewCells::kZero, inserted);
  }

  Status layer(int64_t index, const GrownLayer& grown) {
    const config::ModelConfig& c = plan.from;
    const std::string to = "model.layers." + std::to_string(index) + ".";
    const std::string from = "model.layers." + std::to_string(grown.source) + ".";
    const int64_t hd = c.d_model / c.n_heads;
    const Axis stream = stream_axis(c.d_model, plan.to.d_model);
    const Axis q_rows = unit_axis(plan.query_heads, c.n_heads, hd, false);
    const Axis kv_rows = unit_axis(plan.kv_heads, c.n_kv_heads, hd, false);
    const Axis o_cols = unit_axis(plan.query_heads, c.n_heads, hd, true);
    MS_RETURN_IF_ERROR(norm(to + "input_layernorm.weight", from + "input_layernorm.weight"));
    const std::string to_attn = to + "self_attn.", from_attn = from + "self_attn.";
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      const bool query = proj[0] == 'q';
      MS_RETURN_IF_ERROR(matrix(to_attn + proj + ".weight", from_attn + proj + ".weight",
                                query ? q_rows : kv_rows, stream, NewCells::kFresh));
    }
    MS_RETURN_IF_ERROR(matrix(to_attn + "o_proj.weight", from_attn + "o_proj.weight", stream,
                              o_cols, NewCells::kZero, grown.inserted));
    if (!c.parallel_block) {
      MS_RETURN_IF_ERROR(norm(to + "post_attention_layernorm.weight",
                              from + "post_attention_layernorm.weight"));
    }
    if (c.moe.num_experts == 0) {
      return mlp(to + "mlp.", from + "mlp.", "gate_proj", "up_proj", "down_proj", plan.ffn,
                 c.d_ff, grown.inserted);
    }
    const std::string to_moe = to + "block_sparse_moe.", from_moe = from + "block_sparse_moe.";
    MS_RETURN_IF_ERROR(matrix(to_moe + "gate.weight", from_moe + "gate.weight",
                              identity_axis(c.moe.num_experts), stream, NewCells::kZero));
    if (c.moe.expert_bias) {
      MS_RETURN_IF_ERROR(copy(to_moe + "gate.e_score_correction_bias",
                              from_moe + "gate.e_score_correction_bias", {c.moe.num_experts}));
    }
    for (int64_t e = 0; e < c.moe.num_experts; ++e) {
      const std::string expert = "experts." + std::to_string(e) + ".";
      MS_RETURN_IF_ERROR(mlp(to_moe + expert, from_moe + expert, "w1", "w3", "w2", plan.ffn,
                             c.d_ff, grown.inserted));
    }
    if (c.moe.shared_expert_d_ff > 0) {
      MS_RETURN_IF_ERROR(mlp(to + "mlp.shared_expert.", from + "mlp.shared_expert.", "gate_proj",
                             "up_proj", "down_proj", plan.shared_ffn, c.moe.shared_expert_d_ff,
                             grown.inserted));
    }
    return Status::OK();
  }

  Status model() {
    const config::ModelConfig& c = plan.from;
    const Axis stream = stream_axis(c.d_model, plan.to.d_model);
    const Axis vocab = identity_axis(c.vocab_size);
    MS_RETURN_IF_ERROR(matrix("model.embed_tokens.weight", "model.embed_tokens.weight", vocab,
                              stream, NewCells::kZero));
    for (size_t l = 0; l < plan.layers.size(); ++l) {
      MS_RETURN_IF_ERROR(layer(static_cast<int64_t>(l), plan.layers[l]));
    }
    MS_RETURN_IF_ERROR(norm("model.norm.weight", "model.norm.weight"));
    if (c.tie_embeddings) return Status::OK();
    return matrix("lm_head.weight", "lm_head.weight", vocab, stream, NewCells::kFresh);
  }
};

}  // namespace

Result<std::vector<GrownParameter>> grow_parameters(const GrowPlan& plan,
                                                    const TensorCatalog& source, uint64_t seed) {
  Grower grower{plan, source, seed, {}};
  MS_RETURN_IF_ERROR(grower.model());
  // The grown list must be exactly what a model of the grown config holds, in its order.
  const std::vector<TensorInfo> specs = hf_parameter_specs(plan.to);
  if (specs.size() != grower.out.size()) {
    return Internal("grow made " + std::to_string(grower.out.size()) + " parameters, the grown "
                    "config implies " + std::to_string(specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].name != grower.out[i].name || specs[i].shape != grower.out[i].value.shape()) {
      return Internal("grow made \"" + grower.out[i].name + "\" " +
                      shape_string(grower.out[i].value.shape()) + " where the grown config "
                      "implies \"" + specs[i].name + "\" " + shape_string(specs[i].shape));
    }
  }
  return std::move(grower.out);
}

}  // namespace ms::ckpt
