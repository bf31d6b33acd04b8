// config.json <-> ModelConfig, and safetensors <-> the Transformer's parameter table
// (infer/model_loader.h). Parameters are matched by their Hugging Face names, so a tied
// lm_head is simply absent from the file.
#include "infer/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_names.h"
#include "ckpt/manifest.h"
#include "ckpt/safetensors.h"
#include "io/atomic_file.h"
#include "ops/cast.h"

namespace ms::infer {
namespace {

using nlohmann::json;

Result<int64_t> required_int(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key)) {
    return InvalidArgument(path + ": missing key \"" + key +
                           "\", which inference needs to build the model");
  }
  if (!j[key].is_number_integer()) {
    return InvalidArgument(path + ": key \"" + key + "\" must be an integer");
  }
  return j[key].get<int64_t>();
}

template <typename T>
Result<T> optional_value(const json& j, const char* key, T fallback, const std::string& path) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  try {
    return j[key].get<T>();
  } catch (const json::exception&) {
    return InvalidArgument(path + ": key \"" + key + "\" has the wrong type");
  }
}

}  // namespace

Result<config::ModelConfig> model_config_from_hf_json(const std::string& text,
                                                      const std::string& path) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(path + ": not a JSON object (expected a Hugging Face config.json)");
  }
  // What the model does not implement is refused rather than served wrongly; the toolkit's
  // own sliding_window key is read below.
  MS_RETURN_IF_ERROR(ckpt::check_hf_features(j, path, /*allow_sliding_window=*/true));
  config::ModelConfig c;
  MS_ASSIGN_OR_RETURN(c.d_model, required_int(j, "hidden_size", path));
  MS_ASSIGN_OR_RETURN(c.d_ff, required_int(j, "intermediate_size", path));
  MS_ASSIGN_OR_RETURN(c.n_layers, required_int(j, "num_hidden_layers", path));
  MS_ASSIGN_OR_RETURN(c.n_heads, required_int(j, "num_attention_heads", path));
  MS_ASSIGN_OR_RETURN(c.vocab_size, required_int(j, "vocab_size", path));
  MS_ASSIGN_OR_RETURN(c.max_seq_len, required_int(j, "max_position_embeddings", path));
  MS_ASSIGN_OR_RETURN(c.n_kv_heads,
                      optional_value<int64_t>(j, "num_key_value_heads", c.n_heads, path));
  MS_ASSIGN_OR_RETURN(c.norm_eps, optional_value<double>(j, "rms_norm_eps", 1e-5, path));
  MS_ASSIGN_OR_RETURN(c.rope_theta, optional_value<double>(j, "rope_theta", 10000.0, path));
  MS_ASSIGN_OR_RETURN(c.tie_embeddings,
                      optional_value<bool>(j, "tie_word_embeddings", false, path));
  MS_ASSIGN_OR_RETURN(c.sliding_window, optional_value<int64_t>(j, "sliding_window", 0, path));
  MS_ASSIGN_OR_RETURN(c.parallel_block, optional_value<bool>(j, "ms_parallel_block", false, path));
  MS_ASSIGN_OR_RETURN(c.moe.num_experts, optional_value<int64_t>(j, "num_local_experts", 0, path));
  MS_ASSIGN_OR_RETURN(c.moe.top_k, optional_value<int64_t>(j, "num_experts_per_tok", 2, path));
  MS_ASSIGN_OR_RETURN(c.moe.shared_expert_d_ff,
                      optional_value<int64_t>(j, "shared_expert_intermediate_size", 0, path));
  return c;
}

namespace {

// ckpt's config.json (the export's), plus the toolkit's own keys for what Hugging Face has no
// equivalent of, which this loader reads back (a served model need not be exportable).
std::string hf_config_json(const config::ModelConfig& c) {
  nlohmann::ordered_json j = ckpt::hf_config_json(c);
  if (c.sliding_window > 0) j["sliding_window"] = c.sliding_window;
  if (c.parallel_block) j["ms_parallel_block"] = true;
  return j.dump(2) + "\n";
}

// The safetensors files of dir, in name order.
Result<std::vector<ckpt::SafetensorsFile>> open_weight_files(const std::string& dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".safetensors") paths.push_back(entry.path().string());
  }
  if (ec) return NotFound(dir + ": cannot list the model directory: " + ec.message());
  if (paths.empty()) return NotFound(dir + ": no *.safetensors weight file");
  std::sort(paths.begin(), paths.end());
  std::vector<ckpt::SafetensorsFile> files;
  for (const std::string& p : paths) {
    MS_ASSIGN_OR_RETURN(ckpt::SafetensorsFile f, ckpt::SafetensorsFile::open(p));
    files.push_back(std::move(f));
  }
  return files;
}

// Copies the stored tensor (any float dtype) into the parameter's f32 value.
Status fill_parameter(model::Parameter& p, const std::vector<ckpt::SafetensorsFile>& files,
                      const std::string& dir) {
  for (const ckpt::SafetensorsFile& f : files) {
    const ckpt::SafetensorsEntry* e = f.find(p.name);
    if (e == nullptr) continue;
    if (e->shape != p.global_shape) {
      return InvalidArgument(f.path() + ": tensor " + p.name + " has shape " +
                             Tensor::empty(DType::kF32, e->shape).describe() +
                             " but config.json implies " + p.value.describe());
    }
    MS_ASSIGN_OR_RETURN(Tensor t, f.read(p.name));
    const size_t n = static_cast<size_t>(t.numel());
    float* out = p.value.data<float>();
    switch (t.dtype()) {
      case DType::kF32:
        std::copy_n(t.data<float>(), n, out);
        return Status::OK();
      case DType::kBF16:
        ops::bf16_to_f32(t.data<bf16>(), out, n);
        return Status::OK();
      case DType::kF16:
        ops::f16_to_f32(t.data<f16>(), out, n);
        return Status::OK();
      default:
        return InvalidArgument(f.path() + ": tensor " + p.name + " is " +
                               std::string(ckpt::safetensors_dtype_name(t.dtype())) +
                               "; weights must be F32, BF16 or F16");
    }
  }
  return NotFound(dir + ": no safetensors file holds tensor " + p.name);
}

// Releases the gradients (serving never needs them) and the values `keep` rejects, and returns
// the indices of the parameters left to read.
std::vector<size_t> kept_parameters(model::Transformer& model, const ParameterFilter& keep) {
  const auto keeps = [&](size_t i) { return !keep || keep(model, i); };
  model.release_for_serving(keeps);
  std::vector<size_t> kept;
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    if (keeps(i)) kept.push_back(i);
  }
  return kept;
}

}  // namespace

Result<LoadedModel> load_hf_model(const std::string& dir, const ParameterFilter& keep) {
  const std::string config_path = dir + "/config.json";
  MS_ASSIGN_OR_RETURN(std::string text, io::read_file(config_path));
  MS_ASSIGN_OR_RETURN(config::ModelConfig cfg, model_config_from_hf_json(text, config_path));
  Result<std::unique_ptr<model::Transformer>> created = model::Transformer::create(cfg, 0);
  if (!created.ok()) {
    return InvalidArgument(config_path + ": " + created.status().message());
  }
  LoadedModel loaded;
  loaded.model = std::move(*created);
  MS_ASSIGN_OR_RETURN(std::vector<ckpt::SafetensorsFile> files, open_weight_files(dir));
  for (size_t i : kept_parameters(*loaded.model, keep)) {
    MS_RETURN_IF_ERROR(fill_parameter(loaded.model->parameters()[i], files, dir));
  }
  MS_ASSIGN_OR_RETURN(loaded.tokenizer, data::Tokenizer::load(dir + "/tokenizer.json"));
  if (loaded.tokenizer->vocab_size() > cfg.vocab_size) {
    return InvalidArgument(
        dir + ": tokenizer.json has " + std::to_string(loaded.tokenizer->vocab_size()) +
        " tokens but config.json vocab_size is " + std::to_string(cfg.vocab_size));
  }
  return loaded;
}

namespace {

// Reads the whole tensor p.name from the checkpoint into p.value (f32).
Status read_checkpoint_parameter(model::Parameter& p, const ckpt::Manifest& m,
                                 const std::string& step_dir) {
  const ckpt::TensorRecord* rec = m.find(p.name);
  if (rec == nullptr) {
    return NotFound(step_dir + ": checkpoint has no tensor " + p.name +
                    " which the model in its config needs");
  }
  if (rec->global_shape != p.global_shape) {
    return InvalidArgument(step_dir + ": tensor " + p.name + " has shape " +
                           Tensor::empty(DType::kF32, rec->global_shape).describe() +
                           " but the config implies " + p.value.describe());
  }
  const std::vector<int64_t> offsets(p.global_shape.size(), 0);
  if (rec->dtype == DType::kF32) {
    return ckpt::read_region(step_dir, m, p.name, offsets, p.global_shape, p.value.data<float>());
  }
  if (rec->dtype != DType::kBF16) {
    return InvalidArgument(step_dir + ": tensor " + p.name + " is " +
                           std::string(ckpt::safetensors_dtype_name(rec->dtype)) +
                           "; weights must be F32 or BF16");
  }
  std::vector<bf16> staged(static_cast<size_t>(p.value.numel()));
  MS_RETURN_IF_ERROR(
      ckpt::read_region(step_dir, m, p.name, offsets, p.global_shape, staged.data()));
  ops::bf16_to_f32(staged.data(), p.value.data<float>(), staged.size());
  return Status::OK();
}

}  // namespace

Result<LoadedModel> load_checkpoint_model(const std::string& path, const ParameterFilter& keep) {
  MS_ASSIGN_OR_RETURN(const std::string step_dir, ckpt::resolve_checkpoint(path));
  MS_ASSIGN_OR_RETURN(const ckpt::Manifest m, ckpt::Manifest::read(step_dir));
  if (m.config_yaml.empty()) {
    return InvalidArgument(step_dir +
                           "/manifest.json: config_yaml is empty; the checkpoint "
                           "does not say which model it holds");
  }
  MS_ASSIGN_OR_RETURN(
      const config::RunConfig run,
      config::run_config_from_yaml_text(m.config_yaml, step_dir + "/manifest.json config_yaml"));
  Result<std::unique_ptr<model::Transformer>> created = model::Transformer::create(run.model, 0);
  if (!created.ok()) return InvalidArgument(step_dir + ": " + created.status().message());
  LoadedModel loaded;
  loaded.model = std::move(*created);
  for (size_t i : kept_parameters(*loaded.model, keep)) {
    MS_RETURN_IF_ERROR(read_checkpoint_parameter(loaded.model->parameters()[i], m, step_dir));
  }
  MS_ASSIGN_OR_RETURN(loaded.tokenizer, data::Tokenizer::load(step_dir + "/tokenizer.json"));
  return loaded;
}

Result<LoadedModel> load_model(const std::string& model_dir, const std::string& checkpoint,
                               const ParameterFilter& keep) {
  if (model_dir.empty() == checkpoint.empty()) {
    return InvalidArgument(
        "give exactly one of --model (a Hugging Face directory) or "
        "--checkpoint (a training checkpoint)");
  }
  return model_dir.empty() ? load_checkpoint_model(checkpoint, keep)
                           : load_hf_model(model_dir, keep);
}

Status save_hf_model(const model::Transformer& model, const std::string& tokenizer_json,
                     const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError(dir + ": cannot create the model directory: " + ec.message());
  MS_ASSIGN_OR_RETURN(std::string tokenizer, io::read_file(tokenizer_json));
  std::vector<ckpt::NamedTensor> tensors;
  for (const model::Parameter& p : model.parameters()) tensors.push_back({p.name, &p.value});
  MS_RETURN_IF_ERROR(
      ckpt::write_safetensors(dir + "/model.safetensors", tensors, {{"format", "pt"}}));
  MS_RETURN_IF_ERROR(io::write_file_atomic(dir + "/config.json", hf_config_json(model.config())));
  return io::write_file_atomic(dir + "/tokenizer.json", tokenizer);
}

}  // namespace ms::infer
