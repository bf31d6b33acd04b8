// Import of a Hugging Face model directory (config.json, model.safetensors or
// model-0000X-of-0000N.safetensors with model.safetensors.index.json, tokenizer.json): the
// reverse of hf_export.h, so a model from the wider ecosystem can be fine-tuned by ms-train or
// served by ms-infer. Also the reader of plain safetensors files and directories for
// `ms-ckpt diff`. Tensors are read on demand, one at a time.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ckpt/hf_names.h"
#include "config/run_config.h"
#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// The weight_map of model.safetensors.index.json text read from `path`: tensor name -> file
// name. Every file name must stay inside the model directory (relative, no ".." component, not
// empty), so a hostile index cannot make a reader open files elsewhere; Corruption naming
// `path` and the weight_map entry otherwise, or for text that is not an index.
Result<std::map<std::string, std::string>> parse_safetensors_index(std::string_view text,
                                                                    const std::string& path);

// Every tensor of a safetensors file, or of a directory holding model.safetensors.index.json
// (whose weight_map names the files) or a single model.safetensors. Tensors keep their stored
// dtype. NotFound when there is no safetensors data at `path`; Corruption naming the file for a
// malformed or escaping index, a tensor listed twice or an index entry its file lacks.
Result<TensorCatalog> open_safetensors_catalog(const std::string& path, io::Env& env);
Result<TensorCatalog> open_safetensors_catalog(const std::string& path);

struct HfModel {
  std::string dir;
  config::ModelConfig config;   // from config.json
  std::string tokenizer_json;   // path of dir/tokenizer.json, empty when absent
  TensorCatalog parameters;     // exactly hf_parameter_specs(config), read as f32
};

// The model config of dir/config.json (Hugging Face keys, and the toolkit's own for what Hugging
// Face has no equivalent of); errors name the file and the key. `allow_sliding_window` as for
// open_hf_model.
Result<config::ModelConfig> read_hf_config(const std::string& dir, io::Env& env,
                                           bool allow_sliding_window = false);

// Opens a Hugging Face model directory and checks that its tensors are exactly the ones the
// config implies, with the right shapes (rotary inv_freq buffers some exporters add are
// ignored), before any tensor data is read or allocated: config.json's sizes are checked
// against the safetensors headers, which are checked against the files' sizes. Stored bf16/f16
// weights are widened to f32 on read, since the toolkit trains in f32. Errors name the file and
// the tensor or key. `allow_sliding_window` accepts config.json's sliding_window (ms-infer
// serves it; import refuses it, see check_hf_features).
Result<HfModel> open_hf_model(const std::string& dir, io::Env& env,
                              bool allow_sliding_window = false);
Result<HfModel> open_hf_model(const std::string& dir);

}  // namespace ms::ckpt
