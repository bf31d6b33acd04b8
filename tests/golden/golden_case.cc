// Golden case definitions and their case.json encoding. Only the keys the golden model uses are
// written; the optimizer is always AdamW with a constant learning rate and no clipping, so those
// settings are implied rather than stored.
#include "golden/golden_case.h"

#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/philox.h"

namespace ms::golden {
namespace {

using nlohmann::json;

config::OptimConfig constant_adamw(double lr, double weight_decay) {
  config::OptimConfig optim;
  optim.name = config::OptimizerKind::kAdamW;
  optim.lr = lr;
  optim.betas = {0.9, 0.95};
  optim.eps = 1e-8;
  optim.weight_decay = weight_decay;
  optim.grad_clip = 0;
  optim.schedule = config::LrSchedule::kConstant;
  optim.warmup_steps = 0;
  optim.min_lr = lr;
  return optim;
}

config::ModelConfig tiny_model() {
  config::ModelConfig model;
  model.vocab_size = 96;
  model.d_model = 32;
  model.n_layers = 2;
  model.n_heads = 4;
  model.n_kv_heads = 2;
  model.d_ff = 64;
  model.max_seq_len = 16;
  model.rope_theta = 10000.0;
  model.norm_eps = 1e-5;
  return model;
}

json model_to_json(const config::ModelConfig& m) {
  return json{{"vocab_size", m.vocab_size},
              {"d_model", m.d_model},
              {"n_layers", m.n_layers},
              {"n_heads", m.n_heads},
              {"n_kv_heads", m.n_kv_heads},
              {"d_ff", m.d_ff},
              {"max_seq_len", m.max_seq_len},
              {"rope_theta", m.rope_theta},
              {"tie_embeddings", m.tie_embeddings},
              {"norm_eps", m.norm_eps},
              {"parallel_block", m.parallel_block},
              {"sliding_window", m.sliding_window},
              {"moe",
               {{"num_experts", m.moe.num_experts},
                {"top_k", m.moe.top_k},
                {"aux_loss_coef", m.moe.aux_loss_coef},
                {"shared_expert_d_ff", m.moe.shared_expert_d_ff}}}};
}

// Reads key `key` of object `obj` into `out`, refusing a missing key or a wrong type.
template <typename T>
Status read_key(const json& obj, const char* key, const std::string& where, T& out) {
  if (!obj.is_object() || !obj.contains(key)) {
    return InvalidArgument(where + ": missing key \"" + key + "\"");
  }
  const json& v = obj[key];
  bool ok = false;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_same_v<T, double>) ok = v.is_number();
  else if constexpr (std::is_same_v<T, std::string>) ok = v.is_string();
  else ok = v.is_number_integer();
  if (!ok) return InvalidArgument(where + ": key \"" + key + "\" has the wrong type");
  out = v.get<T>();
  return Status::OK();
}

Status model_from_json(const json& j, const std::string& where, config::ModelConfig& m) {
  MS_RETURN_IF_ERROR(read_key(j, "vocab_size", where, m.vocab_size));
  MS_RETURN_IF_ERROR(read_key(j, "d_model", where, m.d_model));
  MS_RETURN_IF_ERROR(read_key(j, "n_layers", where, m.n_layers));
  MS_RETURN_IF_ERROR(read_key(j, "n_heads", where, m.n_heads));
  MS_RETURN_IF_ERROR(read_key(j, "n_kv_heads", where, m.n_kv_heads));
  MS_RETURN_IF_ERROR(read_key(j, "d_ff", where, m.d_ff));
  MS_RETURN_IF_ERROR(read_key(j, "max_seq_len", where, m.max_seq_len));
  MS_RETURN_IF_ERROR(read_key(j, "rope_theta", where, m.rope_theta));
  MS_RETURN_IF_ERROR(read_key(j, "tie_embeddings", where, m.tie_embeddings));
  MS_RETURN_IF_ERROR(read_key(j, "norm_eps", where, m.norm_eps));
  MS_RETURN_IF_ERROR(read_key(j, "parallel_block", where, m.parallel_block));
  MS_RETURN_IF_ERROR(read_key(j, "sliding_window", where, m.sliding_window));
  if (!j.contains("moe")) return InvalidArgument(where + ": missing key \"moe\"");
  const json& moe = j["moe"];
  const std::string moe_where = where + ".moe";
  MS_RETURN_IF_ERROR(read_key(moe, "num_experts", moe_where, m.moe.num_experts));
  MS_RETURN_IF_ERROR(read_key(moe, "top_k", moe_where, m.moe.top_k));
  MS_RETURN_IF_ERROR(read_key(moe, "aux_loss_coef", moe_where, m.moe.aux_loss_coef));
  return read_key(moe, "shared_expert_d_ff", moe_where, m.moe.shared_expert_d_ff);
}

Status optim_from_json(const json& j, const std::string& where, config::OptimConfig& o) {
  double lr = 0, weight_decay = 0;
  MS_RETURN_IF_ERROR(read_key(j, "lr", where, lr));
  MS_RETURN_IF_ERROR(read_key(j, "weight_decay", where, weight_decay));
  o = constant_adamw(lr, weight_decay);
  MS_RETURN_IF_ERROR(read_key(j, "eps", where, o.eps));
  if (!j.contains("betas") || !j["betas"].is_array() || j["betas"].size() != 2 ||
      !j["betas"][0].is_number() || !j["betas"][1].is_number()) {
    return InvalidArgument(where + ": \"betas\" must be two numbers");
  }
  o.betas = {j["betas"][0].get<double>(), j["betas"][1].get<double>()};
  return Status::OK();
}

Result<json> parse_json(const std::string& text, const std::string& source) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(source + ": not a JSON object");
  }
  return j;
}

}  // namespace

std::vector<GoldenCase> golden_cases() {
  GoldenCase dense{"dense", 1234, 2, 8, 10, tiny_model(), constant_adamw(5e-3, 0.1)};

  GoldenCase moe{"moe", 5681, 2, 8, 10, tiny_model(), constant_adamw(5e-3, 0.1)};
  moe.model.d_ff = 32;
  moe.model.rope_theta = 500000.0;
  moe.model.moe.num_experts = 4;
  moe.model.moe.top_k = 2;
  moe.model.moe.aux_loss_coef = 0.01;
  moe.model.moe.shared_expert_d_ff = 32;

  GoldenCase parallel{"parallel", 91011, 2, 8, 10, tiny_model(), constant_adamw(5e-3, 0.05)};
  parallel.model.parallel_block = true;
  parallel.model.tie_embeddings = true;
  parallel.model.sliding_window = 4;
  parallel.model.norm_eps = 1e-6;
  return {dense, moe, parallel};
}

std::string case_to_json(const GoldenCase& c, const std::vector<std::string>& no_weight_decay) {
  const json j{{"name", c.name},
               {"seed", c.seed},
               {"batch", c.batch},
               {"seq_len", c.seq_len},
               {"steps", c.steps},
               {"model", model_to_json(c.model)},
               {"optim",
                {{"name", "adamw"},
                 {"lr", c.optim.lr},
                 {"betas", c.optim.betas},
                 {"eps", c.optim.eps},
                 {"weight_decay", c.optim.weight_decay},
                 {"schedule", "constant"},
                 {"grad_clip", 0}}},
               {"no_weight_decay", no_weight_decay}};
  return j.dump(2) + "\n";
}

Result<GoldenCase> case_from_json(const std::string& text, const std::string& source) {
  MS_ASSIGN_OR_RETURN(json j, parse_json(text, source));
  GoldenCase c;
  MS_RETURN_IF_ERROR(read_key(j, "name", source, c.name));
  MS_RETURN_IF_ERROR(read_key(j, "seed", source, c.seed));
  MS_RETURN_IF_ERROR(read_key(j, "batch", source, c.batch));
  MS_RETURN_IF_ERROR(read_key(j, "seq_len", source, c.seq_len));
  MS_RETURN_IF_ERROR(read_key(j, "steps", source, c.steps));
  if (!j.contains("model")) return InvalidArgument(source + ": missing key \"model\"");
  MS_RETURN_IF_ERROR(model_from_json(j["model"], source + ": model", c.model));
  if (!j.contains("optim")) return InvalidArgument(source + ": missing key \"optim\"");
  MS_RETURN_IF_ERROR(optim_from_json(j["optim"], source + ": optim", c.optim));
  return c;
}

Result<std::vector<std::string>> no_weight_decay_from_json(const std::string& text,
                                                           const std::string& source) {
  MS_ASSIGN_OR_RETURN(json j, parse_json(text, source));
  if (!j.contains("no_weight_decay") || !j["no_weight_decay"].is_array()) {
    return InvalidArgument(source + ": \"no_weight_decay\" must be a list of parameter names");
  }
  std::vector<std::string> names;
  for (const json& name : j["no_weight_decay"]) {
    if (!name.is_string()) return InvalidArgument(source + ": no_weight_decay holds a non-string");
    names.push_back(name.get<std::string>());
  }
  return names;
}

GoldenBatch make_batch(const GoldenCase& c) {
  const uint64_t stream = stream_id("golden.batch");
  const int64_t vocab = c.model.vocab_size;
  // Token `pos` of row b's sequence of T+1 tokens.
  const auto token = [&](int64_t b, int64_t pos) {
    const float u = uniform(c.seed, stream, static_cast<uint64_t>(b * (c.seq_len + 1) + pos));
    return static_cast<int32_t>(static_cast<int64_t>(u * static_cast<float>(vocab)) % vocab);
  };
  GoldenBatch batch;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < c.seq_len; ++t) {
      batch.inputs.push_back(token(b, t));
      batch.targets.push_back(token(b, t + 1));
    }
  }
  return batch;
}

}  // namespace ms::golden
