// libFuzzer target for the model directory's JSON files (lib/ckpt/hf_names.h, hf_import.h):
// the bytes as config.json must either be refused with a Status or give a ModelConfig whose
// sizes check out, whose tensor count is computed without overflow, whose parameter shapes
// (built when that count is small) have valid sizes, and which hf_config_json writes back to
// the same config; the bytes as model.safetensors.index.json must either be refused or map
// every tensor to a plain file name inside the model directory. Built with clang
// -fsanitize=fuzzer,address locally; CI replays tests/fuzz/corpus/hf_config_json/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/hf_import.h"
#include "ckpt/hf_names.h"
#include "core/checked_math.h"

namespace {

void exercise_config(const nlohmann::json& doc, bool allow_sliding_window) {
  ms::Result<ms::config::ModelConfig> c =
      ms::ckpt::model_config_from_hf_json(doc, "fuzz/config.json", allow_sliding_window);
  if (!c.ok()) return;
  if (!ms::ckpt::check_hf_sizes(*c, "fuzz/config.json").ok()) std::abort();
  ms::Result<int64_t> count = ms::ckpt::hf_parameter_count(*c);
  if (!count.ok()) return;
  if (*count <= 4096) {
    const auto specs = ms::ckpt::hf_parameter_specs(*c);
    if (static_cast<int64_t>(specs.size()) != *count) std::abort();
    for (const ms::ckpt::TensorInfo& t : specs) {
      if (!ms::checked_numel(t.shape, t.name).ok()) std::abort();
    }
  }
  ms::Result<ms::config::ModelConfig> back = ms::ckpt::model_config_from_hf_json(
      ms::ckpt::hf_config_json(*c, /*toolkit_keys=*/true), "fuzz/back.json", true);
  if (!back.ok() || !(*back == *c)) std::abort();
}

void exercise_index(const std::string& text) {
  auto map = ms::ckpt::parse_safetensors_index(text, "fuzz/model.safetensors.index.json");
  if (!map.ok()) return;
  for (const auto& [tensor, file] : *map) {
    if (file.empty() || file == ".." || file.find('/') != std::string::npos) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_discarded()) {
    exercise_config(doc, false);
    exercise_config(doc, true);
  }
  exercise_index(text);
  return 0;
}
