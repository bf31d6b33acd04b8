// Hugging Face directories and checkpoints <-> the Transformer's parameter table
// (infer/model_loader.h). Reading goes through lib/ckpt's readers (config.json, safetensors
// and the index, manifests), which check every size a file claims before the model is
// allocated; this file only creates the model and copies the parameters in. Parameters are
// matched by their Hugging Face names, so a tied lm_head is simply absent from the file.
#include "infer/model_loader.h"

#include <algorithm>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/hf_names.h"
#include "ckpt/manifest.h"
#include "ckpt/safetensors.h"
#include "infer/quantized_model.h"
#include "io/atomic_file.h"
#include "ops/cast.h"

namespace ms::infer {
namespace {

// Copies the catalog's tensor (already f32) into the parameter's value.
Status fill_parameter(model::Parameter& p, const ckpt::TensorCatalog& weights,
                      const std::string& dir) {
  MS_ASSIGN_OR_RETURN(Tensor t, weights.read(p.name));
  if (t.shape() != p.global_shape || t.dtype() != DType::kF32) {
    return InvalidArgument(dir + ": tensor " + p.name + " is " + t.describe() +
                           " but the model needs " + p.value.describe());
  }
  std::copy_n(t.data<float>(), static_cast<size_t>(t.numel()), p.value.data<float>());
  return Status::OK();
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

Result<std::unique_ptr<model::Transformer>> create_model_to_load(const config::ModelConfig& cfg,
                                                                 const std::string& source) {
  Result<std::unique_ptr<model::Transformer>> created = [&] {
    try {
      return model::Transformer::create(cfg, 0, {}, model::ParameterValues::kToLoad);
    } catch (const std::bad_alloc&) {
      return Result<std::unique_ptr<model::Transformer>>(
          Unavailable("out of memory allocating the model"));
    }
  }();
  if (!created.ok()) return created.status().with_context(source);
  return created;
}

Result<std::unique_ptr<data::Tokenizer>> load_dir_tokenizer(const std::string& dir,
                                                            int64_t vocab_size) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tokenizer,
                      data::Tokenizer::load(dir + "/tokenizer.json"));
  if (tokenizer->vocab_size() > vocab_size) {
    return InvalidArgument(dir + ": tokenizer.json has " +
                           std::to_string(tokenizer->vocab_size()) +
                           " tokens but config.json vocab_size is " + std::to_string(vocab_size));
  }
  return tokenizer;
}

Result<LoadedModel> load_hf_model(const std::string& dir, const ParameterFilter& keep,
                                  const WeightOptions& convert) {
  MS_RETURN_IF_ERROR(check_weight_options(convert));
  // A directory `ms-infer quantize` wrote holds codes and scales instead of some weights.
  MS_ASSIGN_OR_RETURN(const bool quantized, is_quantized_model(dir));
  if (quantized && convert.format != ops::WeightFormat::kF32) {
    return InvalidArgument("--weights " + std::string(ops::weight_format_name(convert.format)) +
                           ": the linear weights of " + dir +
                           " are already quantized; serve it without --weights");
  }
  if (quantized) {
    return load_quantized_model(dir, keep, QuantizedValues::kServe, convert.activations);
  }
  // One reader for config.json and the safetensors files (ckpt::open_hf_model, which ms-ckpt
  // import uses too): the config's sizes are checked against the weights' shapes, and those
  // against the files, before the model is allocated.
  MS_ASSIGN_OR_RETURN(ckpt::HfModel hf,
                      ckpt::open_hf_model(dir, io::default_env(), /*allow_sliding_window=*/true));
  const config::ModelConfig& cfg = hf.config;
  LoadedModel loaded;
  MS_ASSIGN_OR_RETURN(loaded.model, create_model_to_load(cfg, dir + "/config.json"));
  LoadConverter converter(*loaded.model, convert);
  for (size_t i : kept_parameters(*loaded.model, keep)) {
    MS_RETURN_IF_ERROR(fill_parameter(loaded.model->parameters()[i], hf.parameters, dir));
    MS_RETURN_IF_ERROR(converter.after_fill(i));
  }
  MS_ASSIGN_OR_RETURN(loaded.serving_weights, converter.finish());
  MS_ASSIGN_OR_RETURN(loaded.tokenizer, load_dir_tokenizer(dir, cfg.vocab_size));
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
  MS_ASSIGN_OR_RETURN(Tensor staged, ckpt::allocate_tensor(DType::kBF16, p.global_shape,
                                                           step_dir + ": tensor " + p.name));
  MS_RETURN_IF_ERROR(
      ckpt::read_region(step_dir, m, p.name, offsets, p.global_shape, staged.raw_data()));
  ops::bf16_to_f32(staged.data<bf16>(), p.value.data<float>(), static_cast<size_t>(staged.numel()));
  return Status::OK();
}

// The config's parameters are in the checkpoint with its shapes, and their shards lie inside
// the data files, before the model (whose size the config gives) is allocated.
Status check_weights_before_allocating(const config::ModelConfig& cfg, const ckpt::Manifest& m,
                                       const std::string& step_dir) {
  const std::string source = step_dir + "/manifest.json config_yaml model";
  MS_RETURN_IF_ERROR(ckpt::check_hf_weights_fit(cfg, source, m.tensors.size(),
                                                "the checkpoint's tensors"));
  for (const ckpt::TensorInfo& want : ckpt::hf_parameter_specs(cfg)) {
    const ckpt::TensorRecord* rec = m.find(want.name);
    if (rec == nullptr) {
      return NotFound(step_dir + ": checkpoint has no tensor " + want.name +
                      " which the model in its config needs");
    }
    if (rec->global_shape != want.shape) {
      return InvalidArgument(step_dir + ": tensor " + want.name + " has shape " +
                             shape_string(rec->global_shape) + " but the config implies " +
                             shape_string(want.shape));
    }
    MS_RETURN_IF_ERROR(ckpt::check_tensor_files(step_dir, *rec, io::default_env()));
  }
  return Status::OK();
}

// A model trained with train.document_mask is served with it: the end-of-document id is
// data.eod_id when set, else the run's tokenizer's (the checkpoint's copy, which built the
// datasets).
Status apply_document_mask(const config::RunConfig& run, const data::Tokenizer& tokenizer,
                           model::Transformer& model) {
  if (!run.train.document_mask) return Status::OK();
  model::DocumentMask mask{true, run.train.document_positions,
                           static_cast<int32_t>(run.data.eod_id)};
  if (mask.eod_id < 0) mask.eod_id = tokenizer.eos_id();
  if (mask.eod_id < 0) {
    return InvalidArgument("train.document_mask is on but data.eod_id is -1 and tokenizer.json "
                           "has no end-of-document token; set data.eod_id in the config");
  }
  return model.set_document_mask(mask);
}

}  // namespace

Result<LoadedModel> load_checkpoint_model(const std::string& path, const ParameterFilter& keep,
                                          const WeightOptions& convert) {
  MS_RETURN_IF_ERROR(check_weight_options(convert));
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
  MS_RETURN_IF_ERROR(check_weights_before_allocating(run.model, m, step_dir));
  LoadedModel loaded;
  MS_ASSIGN_OR_RETURN(loaded.model, create_model_to_load(run.model, step_dir));
  LoadConverter converter(*loaded.model, convert);
  for (size_t i : kept_parameters(*loaded.model, keep)) {
    MS_RETURN_IF_ERROR(read_checkpoint_parameter(loaded.model->parameters()[i], m, step_dir));
    MS_RETURN_IF_ERROR(converter.after_fill(i));
  }
  MS_ASSIGN_OR_RETURN(loaded.serving_weights, converter.finish());
  MS_ASSIGN_OR_RETURN(loaded.tokenizer, data::Tokenizer::load(step_dir + "/tokenizer.json"));
  MS_RETURN_IF_ERROR(apply_document_mask(run, *loaded.tokenizer, *loaded.model)
                         .with_context(step_dir + "/manifest.json config_yaml"));
  return loaded;
}

Result<LoadedModel> load_model(const std::string& model_dir, const std::string& checkpoint,
                               const ParameterFilter& keep, const WeightOptions& convert) {
  if (model_dir.empty() == checkpoint.empty()) {
    return InvalidArgument(
        "give exactly one of --model (a Hugging Face directory) or "
        "--checkpoint (a training checkpoint)");
  }
  return model_dir.empty() ? load_checkpoint_model(checkpoint, keep, convert)
                           : load_hf_model(model_dir, keep, convert);
}

Status save_hf_model(const model::Transformer& model, const std::string& tokenizer_json,
                     const std::string& dir) {
  std::vector<ckpt::NamedTensor> tensors;
  for (const model::Parameter& p : model.parameters()) tensors.push_back({p.name, &p.value});
  // The toolkit's extension keys for what Hugging Face has no equivalent of, which
  // ckpt::model_config_from_hf_json reads back (a served model need not be exportable).
  return ckpt::write_hf_model_dir(dir, tensors, {},
                                  ckpt::hf_config_json(model.config(), /*toolkit_keys=*/true),
                                  tokenizer_json);
}

}  // namespace ms::infer
