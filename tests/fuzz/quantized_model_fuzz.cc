// libFuzzer target for quantized model directories (lib/infer/quantized_model.h): the harness
// builds a directory in a scratch dir (a fixed byte-level tokenizer.json, a config.json and a
// model.safetensors from the input) and reads it as `ms-infer` does. The input is the
// model.safetensors bytes, or a config.json and those bytes joined by kSeparator. Every read
// must either be refused with a Status or give a whole model (dequantized: every parameter
// holds values) with a tokenizer. Run under the replay's 1.5 GB
// limit: no claimed shape may size an allocation the file does not back. Built with clang
// -fsanitize=fuzzer,address locally; CI replays tests/fuzz/corpus/quantized_model/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "infer/quantized_model.h"
#include "io/atomic_file.h"
#include "tests/fuzz/fuzz_scratch.h"

namespace {

constexpr std::string_view kSeparator = "\n--- model.safetensors ---\n";

// A one-layer Llama of d_model 32 over the tokenizer's 263 tokens: int4 with group size 32
// fits its projections.
constexpr std::string_view kConfig =
    R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32, "intermediate_size": 32,)"
    R"( "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,)"
    R"( "vocab_size": 264, "max_position_embeddings": 64, "rms_norm_eps": 1e-05,)"
    R"( "rope_theta": 10000.0, "tie_word_embeddings": false, "hidden_act": "silu"})";

const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = ms::fuzz::scratch_dir() + "/model";
    if (!ms::io::default_env().create_dirs(d).ok()) std::abort();
    const ms::Result<std::string> tokenizer = ms::io::read_file(MS_FUZZ_TOKENIZER_JSON);
    if (!tokenizer.ok()) std::abort();
    ms::fuzz::write_scratch("model/tokenizer.json", *tokenizer);
    return d;
  }();
  return dir;
}

// A model the reader accepts is whole: every parameter the config implies holds its values.
void check_loaded(const ms::infer::LoadedModel& m) {
  if (!m.model || !m.tokenizer) std::abort();
  for (const ms::model::Parameter& p : m.model->parameters()) {
    if (p.value.numel() == 0) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t split = input.find(kSeparator);
  const std::string_view config = split == std::string_view::npos ? kConfig : input.substr(0, split);
  const std::string_view weights =
      split == std::string_view::npos ? input : input.substr(split + kSeparator.size());
  const std::string& dir = model_dir();
  ms::fuzz::write_scratch("model/config.json", config);
  ms::fuzz::write_scratch("model/model.safetensors", weights);
  (void)ms::infer::is_quantized_model(dir);
  (void)ms::infer::quantized_model_formats(dir);
  (void)ms::infer::describe_quantized_model(dir);
  for (const ms::infer::QuantizedValues values :
       {ms::infer::QuantizedValues::kDequantized, ms::infer::QuantizedValues::kServe}) {
    const ms::Result<ms::infer::LoadedModel> m = ms::infer::load_quantized_model(dir, {}, values);
    if (m.ok() && values == ms::infer::QuantizedValues::kDequantized) check_loaded(*m);
  }
  return 0;
}
