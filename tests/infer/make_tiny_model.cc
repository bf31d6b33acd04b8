// ms_infer_make_tiny_model: writes a randomly initialized model (Transformer::create) as a
// Hugging Face directory (config.json, model.safetensors, tokenizer.json) so the e2e test and
// the benchmark can serve a model without training one first.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "infer/model_loader.h"

int main(int argc, char** argv) {
  CLI::App app("Write a random tiny model for ms-infer as a Hugging Face directory");
  std::string dir, tokenizer;
  ms::config::ModelConfig c;
  c.vocab_size = 50304;
  c.d_model = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 128;
  c.max_seq_len = 256;
  c.moe.num_experts = 0;
  uint64_t seed = 1;
  app.add_option("--dir", dir, "Output directory")->required();
  app.add_option("--tokenizer", tokenizer, "tokenizer.json to copy in")->required();
  app.add_option("--vocab-size", c.vocab_size)->capture_default_str();
  app.add_option("--d-model", c.d_model)->capture_default_str();
  app.add_option("--layers", c.n_layers)->capture_default_str();
  app.add_option("--heads", c.n_heads)->capture_default_str();
  app.add_option("--kv-heads", c.n_kv_heads)->capture_default_str();
  app.add_option("--d-ff", c.d_ff)->capture_default_str();
  app.add_option("--max-seq-len", c.max_seq_len)->capture_default_str();
  app.add_option("--experts", c.moe.num_experts, "0: dense")->capture_default_str();
  app.add_option("--top-k", c.moe.top_k)->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  ms::Result<std::unique_ptr<ms::model::Transformer>> m = ms::model::Transformer::create(c, seed);
  ms::Status s = m.ok() ? ms::infer::save_hf_model(**m, tokenizer, dir) : m.status();
  if (!s.ok()) {
    std::fprintf(stderr, "ms_infer_make_tiny_model: %s\n", s.message().c_str());
    return 1;
  }
  return 0;
}
