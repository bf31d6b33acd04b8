// The quantized copies are built first and the f32 values released only once all succeed, so a
// refusal leaves the model as it was. The hook looks a parameter up in a table indexed like
// model.parameters().
#include "infer/serving_weights.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <vector>

#include "ops/backend.h"
#include "ops/quant_gemm.h"

namespace ms::infer {
namespace {

// Indexed by parameter; a matrix with no values answers nothing (f32 path).
using QuantTable = std::vector<ops::QuantizedMatrix>;

bool held(const model::Parameter& p) { return p.value.raw_data() != nullptr; }

Result<ConvertedWeight> quantize_parameter(const model::Parameter& p, size_t index,
                                           const WeightOptions& options) {
  const int64_t rows = p.value.shape()[0], cols = p.value.shape()[1];
  Result<ops::QuantizedMatrix> q = ops::quantize_weights(p.value.data<float>(), rows, cols,
                                                         options.format, options.group_size);
  if (!q.ok()) return q.status().with_context("tensor " + p.name);
  return ConvertedWeight{index, std::move(q).value()};
}

}  // namespace

Status check_weight_options(const WeightOptions& options) {
  if (options.format != ops::WeightFormat::kInt4) return Status::OK();
  const auto& sizes = ops::kInt4GroupSizes;
  if (std::find(std::begin(sizes), std::end(sizes), options.group_size) == std::end(sizes)) {
    return InvalidArgument("--group-size " + std::to_string(options.group_size) +
                           " is not supported for int4; use 32, 64 or 128");
  }
  return Status::OK();
}

Result<ServingWeightStats> quantize_for_serving(model::Transformer& model,
                                                const WeightOptions& options) {
  MS_RETURN_IF_ERROR(check_weight_options(options));
  if (options.format == ops::WeightFormat::kF32) return ServingWeightStats{};
  std::vector<model::Parameter>& params = model.parameters();
  std::vector<ConvertedWeight> weights;
  for (size_t i : model.cached_linear_parameters()) {
    const model::Parameter& p = params[i];
    if (!held(p)) continue;
    MS_ASSIGN_OR_RETURN(ConvertedWeight w, quantize_parameter(p, i, options));
    weights.push_back(std::move(w));
  }
  return install_quantized_weights(model, std::move(weights), options.activations);
}

LoadConverter::LoadConverter(model::Transformer& model, const WeightOptions& options)
    : model_(model), options_(options), linear_(model.parameters().size(), false) {
  for (size_t i : model.cached_linear_parameters()) linear_[i] = true;
}

Status LoadConverter::after_fill(size_t param_index) {
  if (options_.format == ops::WeightFormat::kF32 || !linear_.at(param_index)) {
    return Status::OK();
  }
  model::Parameter& p = model_.parameters()[param_index];
  MS_ASSIGN_OR_RETURN(ConvertedWeight w, quantize_parameter(p, param_index, options_));
  converted_.push_back(std::move(w));
  p.value = Tensor();
  return Status::OK();
}

Result<ServingWeightStats> LoadConverter::finish() {
  return install_quantized_weights(model_, std::move(converted_), options_.activations);
}

Result<ServingWeightStats> install_quantized_weights(model::Transformer& model,
                                                     std::vector<ConvertedWeight> weights,
                                                     ops::ActivationFormat activations) {
  std::vector<model::Parameter>& params = model.parameters();
  std::vector<size_t> linear = model.cached_linear_parameters();
  std::sort(linear.begin(), linear.end());
  auto table = std::make_shared<QuantTable>(params.size());
  std::vector<size_t> converted;
  std::vector<bool> seen(params.size(), false);
  ServingWeightStats stats;
  for (ConvertedWeight& w : weights) {
    const size_t i = w.param_index;
    if (!std::binary_search(linear.begin(), linear.end(), i)) {
      return InvalidArgument((i < params.size() ? "tensor " + params[i].name
                                                : "parameter index " + std::to_string(i)) +
                             " is not a linear weight the serving kernels multiply by");
    }
    const model::Parameter& p = params[i];
    if (seen[i]) return InvalidArgument("tensor " + p.name + " is converted twice");
    seen[i] = true;
    if (w.matrix.rows != p.global_shape[0] || w.matrix.cols != p.global_shape[1]) {
      return InvalidArgument("tensor " + p.name + " is quantized as (" +
                             std::to_string(w.matrix.rows) + ", " +
                             std::to_string(w.matrix.cols) + ") but the model needs " +
                             shape_string(p.global_shape));
    }
    if (w.matrix.format == ops::WeightFormat::kF32) continue;
    const int64_t f32 = w.matrix.rows * w.matrix.cols * static_cast<int64_t>(sizeof(float));
    stats.f32_bytes += f32;
    stats.quantized_bytes += w.matrix.bytes();
    if (model.routed_expert(i)) {
      stats.routed_f32_bytes += f32;
      stats.routed_quantized_bytes += w.matrix.bytes();
    }
    (*table)[i] = std::move(w.matrix);
    converted.push_back(i);
  }
  if (converted.empty()) return stats;
  std::sort(converted.begin(), converted.end());
  model.release_for_serving([&](size_t i) {
    return held(params[i]) && !std::binary_search(converted.begin(), converted.end(), i);
  });
  model.set_cached_linear(
      [table, activations](ops::Backend& be, std::span<const model::CachedLinearOut> outs,
                           const float* x, int64_t n) {
        constexpr size_t kMaxOuts = 4;  // q, k and v at most
        std::array<ops::QuantLinearOut, kMaxOuts> quantized;
        if (outs.size() > kMaxOuts) return false;
        for (size_t i = 0; i < outs.size(); ++i) {
          const ops::QuantizedMatrix& q = (*table)[outs[i].param_index];
          if (q.values.empty()) return false;
          quantized[i] = {q.view(), outs[i].y};
        }
        be.quantized_linears(x, {quantized.data(), outs.size()}, n, activations);
        return true;
      },
      converted);
  stats.matrices = static_cast<int64_t>(converted.size());
  return stats;
}

std::string describe(const WeightOptions& options, const ServingWeightStats& stats) {
  std::string name(ops::weight_format_name(options.format));
  if (options.format == ops::WeightFormat::kInt4) {
    name += " (group " + std::to_string(options.group_size) + ")";
  }
  if (options.format == ops::WeightFormat::kF32) return name;
  if (options.format != ops::WeightFormat::kBF16) {
    name += " x " + std::string(ops::activation_format_name(options.activations)) + " activations";
  }
  char text[200];
  std::snprintf(text, sizeof(text), "%s: %lld linear weights, %.2f MB as f32 -> %.2f MB",
                name.c_str(), static_cast<long long>(stats.matrices),
                static_cast<double>(stats.f32_bytes) / 1e6,
                static_cast<double>(stats.quantized_bytes) / 1e6);
  return text;
}

}  // namespace ms::infer
