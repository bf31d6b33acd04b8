// Export of a model to Hugging Face's layout: safetensors files with Llama/Mixtral tensor names
// (Qwen2-MoE names for a shared expert), model.safetensors.index.json when the weights are
// split, config.json and the tokenizer.json. Tensors are pulled one at a time from a
// TensorCatalog and each output file holds at most `max_shard_bytes` (unless one tensor alone is
// larger), so memory stays bounded by one output file whatever the model size. The directory is
// built under a temporary name and renamed into place, so a failed export leaves nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/hf_names.h"
#include "ckpt/safetensors.h"
#include "config/run_config.h"
#include "core/status.h"
#include "io/env.h"
#include "io/output_path.h"

namespace ms::ckpt {

struct HfExportOptions {
  std::string output_dir;                      // checked and staged by io::StagedDirectory
  io::OutputRules output_rules;                // the inputs it must stay clear of, --replace
  uint64_t max_shard_bytes = 5'000'000'000;    // Hugging Face's default shard size
  std::string tokenizer_json;                  // copied as tokenizer.json when not empty
  // Called after each tensor is written with bytes done and the total.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct HfExportSummary {
  std::vector<std::string> files;  // safetensors file names, in order
  uint64_t tensor_bytes = 0;
  size_t tensors = 0;
};

// Writes config.json (`config`, indented by two spaces, then a newline) and, when `tokenizer`
// holds a tokenizer.json's text, tokenizer.json into `dir`, each atomically.
Status write_hf_side_files(const std::string& dir, const nlohmann::ordered_json& config,
                           const std::optional<std::string>& tokenizer, io::Env& env);

// A Hugging Face model directory with one weights file, as the serving tools save models:
// creates `dir` if needed, then writes model.safetensors (`tensors`, its metadata {"format":
// "pt"} plus `metadata`) and the side files, config.json from `config` and a copy of the file
// `tokenizer_json`. The tokenizer is read before anything is written, so a missing one leaves
// no half-written directory.
Status write_hf_model_dir(const std::string& dir, std::span<const NamedTensor> tensors,
                          const std::map<std::string, std::string>& metadata,
                          const nlohmann::ordered_json& config, const std::string& tokenizer_json);

// The model section of a checkpoint's resolved config (manifest config_yaml); `where` (the
// step directory) prefixes errors.
Result<config::ModelConfig> checkpoint_model_config(const std::string& config_yaml,
                                                    const std::string& where);

// The output file name of shard `index` (0-based) of `count`: "model.safetensors" alone,
// otherwise "model-00001-of-00003.safetensors".
std::string hf_shard_file_name(size_t index, size_t count);

// Writes the model described by `config` whose parameters `source` holds (by Hugging Face
// name; other tensors in the catalog, such as optimizer state, are ignored). Fails with
// InvalidArgument when the config has no Hugging Face equivalent (check_hf_exportable), when a
// parameter is missing or has the wrong shape; with the I/O error naming the file otherwise.
// On failure the output directory is not created.
Result<HfExportSummary> export_hf(const config::ModelConfig& config, const TensorCatalog& source,
                                  const HfExportOptions& options, io::Env& env);
Result<HfExportSummary> export_hf(const config::ModelConfig& config, const TensorCatalog& source,
                                  const HfExportOptions& options);

}  // namespace ms::ckpt
