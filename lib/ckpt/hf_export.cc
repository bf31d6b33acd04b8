// Export to Hugging Face's safetensors layout (see hf_export.h). Output files are planned from
// the tensor sizes first, so the file names ("-of-0000N") are known before any data is read,
// then each file is filled by reading just its tensors.
#include "ckpt/hf_export.h"

#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "ckpt/safetensors.h"
#include "core/version.h"
#include "io/atomic_file.h"

namespace ms::ckpt {
namespace {

// Greedy packing in parameter order: a file takes tensors until the next would pass the limit.
std::vector<std::vector<TensorInfo>> plan_files(const std::vector<TensorInfo>& tensors,
                                                uint64_t max_bytes) {
  std::vector<std::vector<TensorInfo>> files;
  uint64_t bytes_in_last = 0;
  for (const TensorInfo& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
    if (files.empty() || (bytes_in_last > 0 && bytes_in_last + bytes > max_bytes)) {
      files.emplace_back();
      bytes_in_last = 0;
    }
    files.back().push_back(t);
    bytes_in_last += bytes;
  }
  return files;
}

// The catalog's entry for each parameter `config` needs, checked for presence and shape.
Result<std::vector<TensorInfo>> match_parameters(const config::ModelConfig& config,
                                                 const TensorCatalog& source) {
  std::vector<TensorInfo> out;
  for (const TensorInfo& want : hf_parameter_specs(config)) {
    const TensorInfo* have = source.find(want.name);
    if (have == nullptr) {
      return InvalidArgument("the checkpoint has no tensor '" + want.name +
                             "', which the model config needs");
    }
    if (have->shape != want.shape) {
      return InvalidArgument("tensor '" + want.name + "' has shape " + shape_string(have->shape) +
                             " but the model config implies " + shape_string(want.shape));
    }
    out.push_back(*have);
  }
  return out;
}

Status write_one_file(const std::string& path, const std::vector<TensorInfo>& tensors,
                      const TensorCatalog& source, io::Env& env, uint64_t& done, uint64_t total,
                      const HfExportOptions& options) {
  std::vector<Tensor> data;
  data.reserve(tensors.size());
  for (const TensorInfo& t : tensors) {
    MS_ASSIGN_OR_RETURN(Tensor tensor, source.read(t.name));
    done += tensor.nbytes();
    data.push_back(std::move(tensor));
  }
  std::vector<NamedTensor> named;
  for (size_t i = 0; i < tensors.size(); ++i) named.push_back({tensors[i].name, &data[i]});
  MS_RETURN_IF_ERROR(write_safetensors(path, named, {{"format", "pt"}}, env));
  if (options.progress) options.progress(done, total);
  return Status::OK();
}

Status write_index(const std::string& dir, const std::vector<std::vector<TensorInfo>>& files,
                   uint64_t total, io::Env& env) {
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (size_t f = 0; f < files.size(); ++f) {
    for (const TensorInfo& t : files[f]) map[t.name] = hf_shard_file_name(f, files.size());
  }
  index["weight_map"] = map;
  return io::write_file_atomic(env, dir + "/model.safetensors.index.json", index.dump(2) + "\n");
}

Status write_side_files(const std::string& dir, const config::ModelConfig& config,
                        const HfExportOptions& options, io::Env& env) {
  nlohmann::ordered_json cfg = hf_config_json(config);
  cfg["ms_toolkit_version"] = version_string();
  std::optional<std::string> tokenizer;
  if (!options.tokenizer_json.empty()) {
    MS_ASSIGN_OR_RETURN(tokenizer, io::read_file(env, options.tokenizer_json,
                                                 io::kMaxTokenizerFileBytes, "tokenizer"));
  }
  return write_hf_side_files(dir, cfg, tokenizer, env);
}

Status export_into(const std::string& tmp, const config::ModelConfig& config,
                   const TensorCatalog& source, const HfExportOptions& options, io::Env& env,
                   HfExportSummary& summary) {
  MS_ASSIGN_OR_RETURN(std::vector<TensorInfo> params, match_parameters(config, source));
  const auto files = plan_files(params, options.max_shard_bytes);
  uint64_t total = 0, done = 0;
  for (const TensorInfo& t : params) {
    total += static_cast<uint64_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
  }
  for (size_t f = 0; f < files.size(); ++f) {
    summary.files.push_back(hf_shard_file_name(f, files.size()));
    MS_RETURN_IF_ERROR(write_one_file(tmp + "/" + summary.files.back(), files[f], source, env,
                                      done, total, options));
  }
  if (files.size() > 1) MS_RETURN_IF_ERROR(write_index(tmp, files, total, env));
  MS_RETURN_IF_ERROR(write_side_files(tmp, config, options, env));
  summary.tensor_bytes = total;
  summary.tensors = params.size();
  return Status::OK();
}

}  // namespace

Status write_hf_side_files(const std::string& dir, const nlohmann::ordered_json& config,
                           const std::optional<std::string>& tokenizer, io::Env& env) {
  MS_RETURN_IF_ERROR(io::write_file_atomic(env, dir + "/config.json", config.dump(2) + "\n"));
  if (!tokenizer) return Status::OK();
  return io::write_file_atomic(env, dir + "/tokenizer.json", *tokenizer);
}

Status write_hf_model_dir(const std::string& dir, std::span<const NamedTensor> tensors,
                          const std::map<std::string, std::string>& metadata,
                          const nlohmann::ordered_json& config, const std::string& tokenizer_json) {
  io::Env& env = io::default_env();
  MS_ASSIGN_OR_RETURN(std::string tokenizer,
                      io::read_file(env, tokenizer_json, io::kMaxTokenizerFileBytes, "tokenizer"));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IOError(dir + ": cannot create the model directory: " + ec.message());
  std::map<std::string, std::string> all_metadata = metadata;
  all_metadata["format"] = "pt";
  MS_RETURN_IF_ERROR(write_safetensors(dir + "/model.safetensors", tensors, all_metadata, env));
  return write_hf_side_files(dir, config, tokenizer, env);
}

Result<config::ModelConfig> checkpoint_model_config(const std::string& config_yaml,
                                                    const std::string& where) {
  if (config_yaml.empty()) {
    return InvalidArgument(where + "/manifest.json: the checkpoint records no run config, so its "
                           "model cannot be described");
  }
  Result<config::RunConfig> rc =
      config::run_config_from_yaml_text(config_yaml, where + "/manifest.json config");
  if (!rc.ok()) return rc.status();
  return rc->model;
}

std::string hf_shard_file_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  char name[64];
  std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

Result<HfExportSummary> export_hf(const config::ModelConfig& config, const TensorCatalog& source,
                                  const HfExportOptions& options, io::Env& env) {
  MS_RETURN_IF_ERROR(check_hf_exportable(config));
  if (options.output_dir.empty()) return InvalidArgument("export needs an output directory");
  if (options.max_shard_bytes == 0) return InvalidArgument("--max-shard-bytes must be positive");
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::StagedDirectory> out,
                      io::StagedDirectory::create(env, options.output_dir, options.output_rules));
  HfExportSummary summary;
  MS_RETURN_IF_ERROR(export_into(out->path(), config, source, options, env, summary));
  MS_RETURN_IF_ERROR(out->commit());
  return summary;
}

Result<HfExportSummary> export_hf(const config::ModelConfig& config, const TensorCatalog& source,
                                  const HfExportOptions& options) {
  return export_hf(config, source, options, io::default_env());
}

}  // namespace ms::ckpt
