// Writing and reading quantized model directories (infer/quantized_model.h). The reader checks
// the whole file against the config before allocating the model, and every code and scale
// before the model sees it, so a damaged or inconsistent file is refused with the tensor's name
// instead of serving wrong weights.
#include "infer/quantized_model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <new>
#include <nlohmann/json.hpp>
#include <set>

#include "ckpt/hf_export.h"
#include "ckpt/hf_import.h"
#include "ckpt/hf_names.h"
#include "ckpt/safetensors.h"
#include "io/atomic_file.h"

namespace ms::infer {
namespace {

using nlohmann::json;

std::string model_file(const std::string& dir) { return dir + "/model.safetensors"; }
std::string qweight_name(const std::string& name) { return name + ".qweight"; }
std::string scales_name(const std::string& name) { return name + ".scales"; }

// One tensor's entry in the "ms_quantization" metadata.
struct StoredFormat {
  WeightOptions options;
  std::vector<int64_t> shape;  // (rows, cols) of the f32 weight
};

// The dtype and shape of the codes of a (rows, cols) weight stored in `f`.
DType codes_dtype(ops::WeightFormat f) {
  return f == ops::WeightFormat::kBF16 ? DType::kBF16 : DType::kU8;
}
std::vector<int64_t> codes_shape(ops::WeightFormat f, int64_t rows, int64_t cols) {
  return {rows, f == ops::WeightFormat::kInt4 ? cols / 2 : cols};
}
// The scales' shape; empty for bf16, which has none.
std::vector<int64_t> scales_shape(const WeightOptions& o, int64_t rows, int64_t cols) {
  if (o.format == ops::WeightFormat::kInt8) return {rows};
  if (o.format == ops::WeightFormat::kInt4) return {rows, cols / o.group_size};
  return {};
}

std::string metadata_json(const std::vector<ConvertedWeight>& weights,
                          const model::Transformer& model) {
  json tensors = json::object();
  for (const ConvertedWeight& w : weights) {
    json entry = {{"format", std::string(ops::weight_format_name(w.matrix.format))},
                  {"shape", {w.matrix.rows, w.matrix.cols}}};
    if (w.matrix.format == ops::WeightFormat::kInt4) entry["group_size"] = w.matrix.group_size;
    tensors[model.parameters()[w.param_index].name] = entry;
  }
  return json{{"version", kQuantizedModelVersion}, {"tensors", tensors}}.dump();
}

}  // namespace

FormatAssignment uniform_assignment(const model::Transformer& model,
                                    const WeightOptions& options) {
  FormatAssignment formats;
  for (size_t i : model.cached_linear_parameters()) {
    formats[model.parameters()[i].name] = options;
  }
  return formats;
}

Result<std::vector<ConvertedWeight>> quantize_assignment(const model::Transformer& model,
                                                         const FormatAssignment& formats) {
  std::map<std::string, size_t> linear;
  for (size_t i : model.cached_linear_parameters()) linear[model.parameters()[i].name] = i;
  std::vector<ConvertedWeight> out;
  for (const auto& [name, options] : formats) {
    const auto it = linear.find(name);
    if (it == linear.end()) {
      return InvalidArgument("tensor " + name +
                             " is not a linear weight the serving kernels multiply by");
    }
    MS_RETURN_IF_ERROR(check_weight_options(options).with_context("tensor " + name));
    if (options.format == ops::WeightFormat::kF32) continue;
    const model::Parameter& p = model.parameters()[it->second];
    Result<ops::QuantizedMatrix> q =
        ops::quantize_weights(p.value.data<float>(), p.global_shape[0], p.global_shape[1],
                              options.format, options.group_size);
    if (!q.ok()) return q.status().with_context("tensor " + name);
    out.push_back({it->second, std::move(q).value()});
  }
  std::sort(out.begin(), out.end(), [](const ConvertedWeight& a, const ConvertedWeight& b) {
    return a.param_index < b.param_index;
  });
  return out;
}

Status dequantize_in_place(model::Transformer& model, const FormatAssignment& formats) {
  MS_ASSIGN_OR_RETURN(const std::vector<ConvertedWeight> weights,
                      quantize_assignment(model, formats));
  for (const ConvertedWeight& w : weights) {
    ops::dequantize_weights(w.matrix.view(),
                            model.parameters()[w.param_index].value.data<float>());
  }
  return Status::OK();
}

Status save_quantized_model(const model::Transformer& model, const FormatAssignment& formats,
                            const std::string& tokenizer_json, const std::string& dir) {
  MS_ASSIGN_OR_RETURN(std::vector<ConvertedWeight> weights, quantize_assignment(model, formats));
  // Views over the matrices' bytes, which outlive the write; reserved so they do not move.
  std::vector<Tensor> views;
  views.reserve(2 * weights.size());
  std::vector<ckpt::NamedTensor> tensors;
  size_t next = 0;
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    const model::Parameter& p = model.parameters()[i];
    if (next == weights.size() || weights[next].param_index != i) {
      tensors.push_back({p.name, &p.value});
      continue;
    }
    ops::QuantizedMatrix& m = weights[next++].matrix;
    views.push_back(Tensor::view_of(codes_dtype(m.format), codes_shape(m.format, m.rows, m.cols),
                                    m.values.data()));
    tensors.push_back({qweight_name(p.name), &views.back()});
    const std::vector<int64_t> scales = scales_shape({m.format, m.group_size}, m.rows, m.cols);
    if (scales.empty()) continue;
    views.push_back(Tensor::view_of(DType::kF32, scales, m.scales.data()));
    tensors.push_back({scales_name(p.name), &views.back()});
  }
  return ckpt::write_hf_model_dir(
      dir, tensors, {{kQuantizationMetadataKey, metadata_json(weights, model)}},
      ckpt::hf_config_json(model.config(), /*toolkit_keys=*/true), tokenizer_json);
}

Result<bool> is_quantized_model(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(model_file(dir), ec)) return false;
  MS_ASSIGN_OR_RETURN(const ckpt::SafetensorsFile file, ckpt::SafetensorsFile::open(model_file(dir)));
  return file.metadata().count(kQuantizationMetadataKey) > 0;
}

namespace {

// The metadata's tensors, each checked for a known format and group size; `where` names the
// file.
Result<std::map<std::string, StoredFormat>> parse_metadata(const std::string& text,
                                                           const std::string& where) {
  const std::string what = where + ": metadata " + kQuantizationMetadataKey;
  const json doc = json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return InvalidArgument(what + " is not JSON");
  if (doc.value("version", json()) != kQuantizedModelVersion) {
    return InvalidArgument(what + " has version " + doc.value("version", json()).dump() +
                           "; this reader knows version " +
                           std::to_string(kQuantizedModelVersion));
  }
  if (!doc.contains("tensors") || !doc["tensors"].is_object()) {
    return InvalidArgument(what + " has no \"tensors\" object");
  }
  std::map<std::string, StoredFormat> out;
  for (const auto& [name, entry] : doc["tensors"].items()) {
    const std::string at = what + ": tensor " + name;
    if (!entry.is_object() || !entry.contains("format") || !entry["format"].is_string()) {
      return InvalidArgument(at + " has no \"format\" string");
    }
    StoredFormat f;
    Result<ops::WeightFormat> format = ops::parse_weight_format(entry["format"].get<std::string>());
    if (!format.ok()) return format.status().with_context(at);
    if (*format == ops::WeightFormat::kF32) {
      return InvalidArgument(at + " says f32, which is stored under the tensor's own name");
    }
    f.options.format = *format;
    f.options.group_size = 0;
    if (*format == ops::WeightFormat::kInt4) {
      if (!entry.contains("group_size") || !entry["group_size"].is_number_integer()) {
        return InvalidArgument(at + " is int4 but has no integer \"group_size\"");
      }
      f.options.group_size = entry["group_size"].get<int64_t>();
      if (!check_weight_options(f.options).ok()) {
        return InvalidArgument(at + " has group_size " + std::to_string(f.options.group_size) +
                               "; int4 takes 32, 64 or 128");
      }
    }
    if (!entry.contains("shape") || !entry["shape"].is_array() || entry["shape"].size() != 2 ||
        !entry["shape"][0].is_number_integer() || !entry["shape"][1].is_number_integer()) {
      return InvalidArgument(at + " has no \"shape\" of two integers");
    }
    f.shape = entry["shape"].get<std::vector<int64_t>>();
    out[name] = std::move(f);
  }
  return out;
}

// Whether the file has `name` with this dtype and shape; InvalidArgument or NotFound naming it.
Status check_entry(const ckpt::SafetensorsFile& file, const std::string& name, DType dtype,
                   const std::vector<int64_t>& shape, const std::string& why) {
  const ckpt::SafetensorsEntry* e = file.find(name);
  if (e == nullptr) return NotFound(file.path() + ": tensor " + name + " is missing (" + why + ")");
  if (e->dtype != dtype || e->shape != shape) {
    return InvalidArgument(file.path() + ": tensor " + name + " is " +
                           std::string(ckpt::safetensors_dtype_name(e->dtype)) + " " +
                           shape_string(e->shape) + " but " + why + " needs " +
                           std::string(ckpt::safetensors_dtype_name(dtype)) + " " +
                           shape_string(shape));
  }
  return Status::OK();
}

// Every tensor the config implies is stored (F32) or quantized with its codes and scales, with
// the right shapes, and the file holds nothing else.
Status check_file_against_config(const ckpt::SafetensorsFile& file,
                                 const std::vector<ckpt::TensorInfo>& specs,
                                 const std::map<std::string, StoredFormat>& formats) {
  std::set<std::string> expected;
  for (const ckpt::TensorInfo& spec : specs) {
    const auto it = formats.find(spec.name);
    if (it == formats.end()) {
      MS_RETURN_IF_ERROR(check_entry(file, spec.name, DType::kF32, spec.shape,
                                     "the model's config"));
      expected.insert(spec.name);
      continue;
    }
    const StoredFormat& f = it->second;
    if (f.shape != spec.shape) {
      return InvalidArgument(file.path() + ": metadata gives tensor " + spec.name + " shape " +
                             shape_string(f.shape) + " but the config implies " +
                             shape_string(spec.shape));
    }
    const int64_t rows = spec.shape[0], cols = spec.shape[1];
    MS_RETURN_IF_ERROR(ops::check_quantize_shape(f.options.format, rows, cols,
                                                 f.options.group_size)
                           .with_context(file.path() + ": tensor " + spec.name));
    const std::string why = std::string(ops::weight_format_name(f.options.format)) +
                            (f.options.format == ops::WeightFormat::kInt4
                                 ? " group " + std::to_string(f.options.group_size)
                                 : "") +
                            " of " + shape_string(spec.shape);
    MS_RETURN_IF_ERROR(check_entry(file, qweight_name(spec.name), codes_dtype(f.options.format),
                                   codes_shape(f.options.format, rows, cols), why));
    expected.insert(qweight_name(spec.name));
    const std::vector<int64_t> scales = scales_shape(f.options, rows, cols);
    if (scales.empty()) continue;
    MS_RETURN_IF_ERROR(check_entry(file, scales_name(spec.name), DType::kF32, scales, why));
    expected.insert(scales_name(spec.name));
  }
  for (const auto& [name, f] : formats) {
    if (std::none_of(specs.begin(), specs.end(),
                     [&](const ckpt::TensorInfo& s) { return s.name == name; })) {
      return InvalidArgument(file.path() + ": metadata names tensor " + name +
                             " which the model in config.json does not have");
    }
  }
  for (const ckpt::SafetensorsEntry& e : file.tensors()) {
    if (expected.count(e.name) == 0) {
      return InvalidArgument(file.path() + ": tensor " + e.name +
                             " is neither a model tensor nor the codes or scales of one");
    }
  }
  return Status::OK();
}

// The int8 code -128 and the int4 nibble 0 (q = -8) lie outside the symmetric range the
// kernels assume; non-finite scales would poison every output.
Status check_scales(const ops::QuantizedMatrix& m, const std::string& where) {
  for (size_t i = 0; i < m.scales.size(); ++i) {
    if (!std::isfinite(m.scales[i])) {
      return InvalidArgument(where + ": scale " + std::to_string(i) + " is not finite");
    }
  }
  return Status::OK();
}

// Whether any byte holds a code outside the format's range: a branch-free scan the compiler
// vectorizes, since a load checks every byte of every weight; the byte-by-byte search that
// names the first bad one runs only after this found one.
bool any_bad_code(const ops::QuantizedMatrix& m) {
  unsigned bad = 0;
  if (m.format == ops::WeightFormat::kInt8) {
    for (const uint8_t b : m.values) bad |= static_cast<unsigned>(b == 0x80);
  } else if (m.format == ops::WeightFormat::kInt4) {
    for (const uint8_t b : m.values) {
      bad |= static_cast<unsigned>((b & 0x0f) == 0) | static_cast<unsigned>((b >> 4) == 0);
    }
  }
  return bad != 0;
}

Status check_codes(const ops::QuantizedMatrix& m, const std::string& where) {
  if (!any_bad_code(m)) return check_scales(m, where);
  for (size_t i = 0; i < m.values.size(); ++i) {
    const uint8_t b = m.values[i];
    const bool bad = m.format == ops::WeightFormat::kInt8 ? b == 0x80
                     : m.format == ops::WeightFormat::kInt4 ? ((b & 0x0f) == 0 || (b >> 4) == 0)
                                                            : false;
    if (!bad) continue;
    const int64_t per_row = static_cast<int64_t>(m.values.size()) / m.rows;
    const bool int8 = m.format == ops::WeightFormat::kInt8;
    return InvalidArgument(where + ": byte " + std::to_string(i) + " (row " +
                           std::to_string(static_cast<int64_t>(i) / per_row) + ") is " +
                           std::to_string(b) + ", which holds a code outside " +
                           (int8 ? "int8's [-127, 127]" : "int4's [-7, 7] (a nibble of 0)"));
  }
  return check_scales(m, where);
}

Result<ops::QuantizedMatrix> read_matrix(const ckpt::SafetensorsFile& file,
                                         const std::string& name, const StoredFormat& f) {
  ops::QuantizedMatrix m;
  m.format = f.options.format;
  m.rows = f.shape[0];
  m.cols = f.shape[1];
  m.group_size = f.options.format == ops::WeightFormat::kInt4 ? f.options.group_size
                 : f.options.format == ops::WeightFormat::kInt8 ? m.cols
                                                                : 0;
  MS_ASSIGN_OR_RETURN(const Tensor codes, file.read(qweight_name(name)));
  const auto* bytes = static_cast<const uint8_t*>(codes.raw_data());
  m.values.assign(bytes, bytes + codes.nbytes());
  if (!scales_shape(f.options, m.rows, m.cols).empty()) {
    MS_ASSIGN_OR_RETURN(const Tensor scales, file.read(scales_name(name)));
    m.scales.assign(scales.data<float>(), scales.data<float>() + scales.numel());
  }
  MS_RETURN_IF_ERROR(check_codes(m, file.path() + ": tensor " + qweight_name(name)));
  return m;
}

}  // namespace

Result<FormatAssignment> quantized_model_formats(const std::string& dir) {
  MS_ASSIGN_OR_RETURN(const ckpt::SafetensorsFile file,
                      ckpt::SafetensorsFile::open(model_file(dir)));
  const auto meta = file.metadata().find(kQuantizationMetadataKey);
  if (meta == file.metadata().end()) return FormatAssignment{};
  MS_ASSIGN_OR_RETURN(const auto formats, parse_metadata(meta->second, file.path()));
  FormatAssignment out;
  for (const auto& [name, f] : formats) out[name] = f.options;
  return out;
}

Result<std::string> describe_quantized_model(const std::string& dir) {
  MS_ASSIGN_OR_RETURN(const bool quantized, is_quantized_model(dir));
  if (!quantized) return std::string("f32 (not quantized)");
  MS_ASSIGN_OR_RETURN(const FormatAssignment formats, quantized_model_formats(dir));
  std::map<std::string, int64_t> counts;
  for (const auto& [name, f] : formats) {
    std::string label(ops::weight_format_name(f.format));
    if (f.format == ops::WeightFormat::kInt4) label += "-g" + std::to_string(f.group_size);
    ++counts[label];
  }
  std::string text;
  for (const auto& [label, n] : counts) {
    text += (text.empty() ? "" : ", ") + label + " x" + std::to_string(n);
  }
  return text.empty() ? std::string("f32") : text;
}

Result<LoadedModel> load_quantized_model(const std::string& dir, const ParameterFilter& keep,
                                         QuantizedValues values,
                                         ops::ActivationFormat activations) {
  MS_ASSIGN_OR_RETURN(const config::ModelConfig cfg,
                      ckpt::read_hf_config(dir, io::default_env(), /*allow_sliding_window=*/true));
  MS_ASSIGN_OR_RETURN(const ckpt::SafetensorsFile file,
                      ckpt::SafetensorsFile::open(model_file(dir)));
  const auto meta = file.metadata().find(kQuantizationMetadataKey);
  if (meta == file.metadata().end()) {
    return InvalidArgument(file.path() + ": no " + std::string(kQuantizationMetadataKey) +
                           " metadata; not a quantized model");
  }
  MS_ASSIGN_OR_RETURN(const auto formats, parse_metadata(meta->second, file.path()));
  MS_RETURN_IF_ERROR(ckpt::check_hf_weights_fit(cfg, dir + "/config.json", file.tensors().size(),
                                                file.path()));
  MS_RETURN_IF_ERROR(check_file_against_config(file, ckpt::hf_parameter_specs(cfg), formats));

  LoadedModel loaded;
  MS_ASSIGN_OR_RETURN(loaded.model, create_model_to_load(cfg, dir + "/config.json"));
  model::Transformer& model = *loaded.model;
  std::set<std::string> linear;
  for (size_t i : model.cached_linear_parameters()) linear.insert(model.parameters()[i].name);
  for (const auto& [name, f] : formats) {
    if (linear.count(name) == 0) {
      return InvalidArgument(file.path() + ": metadata quantizes tensor " + name +
                             ", which is not a linear weight the serving kernels multiply by");
    }
  }
  // Served quantized weights never need their f32 values: release them unread with those `keep`
  // rejects, so the model's memory is the quantized bytes plus what stays f32.
  const auto kept = [&](size_t i) { return !keep || keep(model, i); };
  const auto served_quantized = [&](size_t i) {
    return values == QuantizedValues::kServe && formats.count(model.parameters()[i].name) != 0;
  };
  model.release_for_serving([&](size_t i) { return kept(i) && !served_quantized(i); });
  std::vector<ConvertedWeight> converted;
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    model::Parameter& p = model.parameters()[i];
    if (!kept(i)) continue;
    const auto it = formats.find(p.name);
    if (it == formats.end()) {
      MS_ASSIGN_OR_RETURN(const Tensor t, file.read(p.name));
      std::copy_n(t.data<float>(), static_cast<size_t>(t.numel()), p.value.data<float>());
      continue;
    }
    MS_ASSIGN_OR_RETURN(ops::QuantizedMatrix m, read_matrix(file, p.name, it->second));
    if (values == QuantizedValues::kDequantized) {
      ops::dequantize_weights(m.view(), p.value.data<float>());
    } else {
      converted.push_back({i, std::move(m)});
    }
  }
  if (values == QuantizedValues::kServe) {
    MS_ASSIGN_OR_RETURN(loaded.serving_weights,
                        install_quantized_weights(model, std::move(converted), activations));
  }
  MS_ASSIGN_OR_RETURN(loaded.tokenizer, load_dir_tokenizer(dir, cfg.vocab_size));
  return loaded;
}

}  // namespace ms::infer
