// Loading a model to serve: a training checkpoint (lib/ckpt) or a Hugging Face-style directory
// (config.json with Llama/Mixtral keys, *.safetensors weights under Hugging Face names,
// tokenizer.json) becomes the training model
// (model::Transformer, the one model definition of the toolkit) with its own tokenizer. The
// writer does the reverse, so tests, the e2e script and the benchmark can serve a model made
// with Transformer::create without a trained checkpoint.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "config/run_config.h"
#include "core/status.h"
#include "data/tokenizer.h"
#include "infer/serving_weights.h"
#include "model/transformer.h"

namespace ms::infer {

struct LoadedModel {
  std::unique_ptr<model::Transformer> model;
  std::unique_ptr<data::Tokenizer> tokenizer;
  // Set when the loader converted the linear weights (WeightOptions other than f32) or read
  // them quantized from a quantized model directory (serving_weights.h); their quantized bytes
  // are held by the model's CachedLinear hook, not by parameters().
  ServingWeightStats serving_weights;
};

// Which parameters (by index into model.parameters()) a rank loads; the others are released
// (model::Transformer::release_for_serving). Empty: all. Gradients are always released.
using ParameterFilter = std::function<bool(const model::Transformer& model, size_t param_index)>;

// Reads dir/config.json (ckpt::model_config_from_hf_json, the toolkit's one config.json reader,
// accepting its sliding_window and ms_parallel_block keys), checks its sizes against the
// safetensors headers (model.safetensors, or the files model.safetensors.index.json names,
// which must lie inside dir) before the model is allocated, then reads every tensor the model
// needs (F32, BF16 or F16; converted to f32) and dir/tokenizer.json. A quantized model
// directory (infer/quantized_model.h) is read by load_quantized_model, its quantized weights
// installed for serving. Errors name the file and
// the tensor (missing, wrong shape, unexpected) or key. The caller owns the result.
// `convert` other than f32 quantizes each linear weight as soon as it is read and releases its
// f32 value (LoadConverter), so the peak is the quantized model plus one f32 matrix; refused
// for a quantized model directory. The model is allocated without gradients or random
// initialization (model::ParameterValues::kToLoad): memory is committed only for what is read.
Result<LoadedModel> load_hf_model(const std::string& dir, const ParameterFilter& keep = {},
                                  const WeightOptions& convert = {});

// dir/tokenizer.json of a Hugging Face or quantized model directory; InvalidArgument naming the
// directory when it holds more tokens than the config's vocab_size.
Result<std::unique_ptr<data::Tokenizer>> load_dir_tokenizer(const std::string& dir,
                                                            int64_t vocab_size);

// Reads a training checkpoint (a step directory, a checkpoints/ directory or its `latest` file;
// any parallel layout, since whole tensors are read across shards): the model section of the
// run config kept in the manifest, every parameter by name (F32 or BF16), and the
// tokenizer.json copied beside it. The config's parameter shapes are checked against the
// manifest, and the shards against the data files' sizes, before the model is allocated.
// Errors name the step directory and the missing tensor/key.
Result<LoadedModel> load_checkpoint_model(const std::string& path,
                                          const ParameterFilter& keep = {},
                                          const WeightOptions& convert = {});

// Exactly one of model_dir (Hugging Face layout) or checkpoint must be non-empty;
// InvalidArgument otherwise. `convert` as for load_hf_model.
Result<LoadedModel> load_model(const std::string& model_dir, const std::string& checkpoint,
                               const ParameterFilter& keep = {},
                               const WeightOptions& convert = {});

// The Transformer for `cfg` with its parameter values left to be read in
// (ParameterValues::kToLoad), for a loader that has checked cfg's sizes against the weights;
// errors, out of memory (which the library throws) included, are prefixed with `source`.
Result<std::unique_ptr<model::Transformer>> create_model_to_load(const config::ModelConfig& cfg,
                                                                 const std::string& source);

// Writes dir/config.json, dir/model.safetensors (f32, tied lm_head omitted) and a copy of
// tokenizer_json as dir/tokenizer.json, each atomically. Creates dir if needed.
Status save_hf_model(const model::Transformer& model, const std::string& tokenizer_json,
                     const std::string& dir);

}  // namespace ms::infer
