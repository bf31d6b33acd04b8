// The flags `ms-infer generate` and `ms-infer bench` share: the engine's sizes and how the
// ranks of an mpirun job serve (infer/serving.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/status.h"
#include "infer/serving.h"
#include "ops/quant.h"
#include "ops/quant_act.h"

namespace ms::infer_cmd {

// --activations, bound to weights.activations.
inline void add_activations_flag(CLI::App* sub, infer::WeightOptions& weights) {
  sub->add_option_function<std::string>(
         "--activations",
         [&weights](const std::string& name) {
           weights.activations = *ops::parse_activation_format(name);
         },
         "What int8 and int4 weights multiply: int8 (activations rounded to 8 bits per 64 "
         "values, integer dot products) or f32 (slower, closer to f32)")
      ->check(CLI::IsMember({"f32", "int8"}))
      ->default_str(std::string(ops::activation_format_name(weights.activations)));
}

// Adds --max-batch, --kv-blocks, --block-size, --attention-ranks, --micro-batches, --weights,
// --group-size, --activations, --draft-model and --draft-tokens, bound to `o`, whose current
// values are the defaults shown.
inline void add_serving_flags(CLI::App* sub, infer::ServeOptions& o) {
  sub->add_option("--max-batch", o.engine.max_batch, "Sequences decoded together at most")
      ->capture_default_str();
  sub->add_option("--kv-blocks", o.engine.kv_blocks, "KV cache blocks")->capture_default_str();
  sub->add_option("--block-size", o.engine.block_size, "Token positions per KV block")
      ->capture_default_str();
  sub->add_option("--attention-ranks", o.attention_ranks,
                  "Under mpirun, serve a MoE model with this many attention ranks and the "
                  "experts on the other ranks (0: every rank holds the whole model)")
      ->capture_default_str();
  sub->add_option("--micro-batches", o.micro_batches,
                  "Micro-batches per step ping-ponging between attention and expert ranks")
      ->capture_default_str();
  sub->add_option_function<std::string>(
         "--weights",
         [&o](const std::string& name) { o.weights.format = *ops::parse_weight_format(name); },
         "Format the linear weights are served in: f32 as loaded, bf16, int8 (a scale per "
         "output channel) or int4 (a scale per --group-size inputs)")
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}))
      ->default_str(std::string(ops::weight_format_name(o.weights.format)));
  sub->add_option("--group-size", o.weights.group_size, "Inputs per int4 scale: 32, 64 or 128")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  add_activations_flag(sub, o.weights);
  CLI::Option* draft =
      sub->add_option("--draft-model", o.draft_model,
                      "Speculative decoding: a smaller model with the target's tokenizer (a "
                      "Hugging Face directory, or a training checkpoint) that proposes tokens "
                      "the target verifies")
          ->check(CLI::ExistingPath);
  sub->add_option("--draft-tokens", o.engine.draft_tokens,
                  "Tokens the draft proposes per round (with --draft-model)")
      ->capture_default_str()
      ->needs(draft);
}

// The draft flags' refusal that needs no model: k below 1 (checked again by the engine).
inline Status check_draft_flags(const infer::ServeOptions& o) {
  if (o.engine.draft_tokens < 1) {
    return InvalidArgument("--draft-tokens (" + std::to_string(o.engine.draft_tokens) +
                           ") must be at least 1");
  }
  return Status::OK();
}

}  // namespace ms::infer_cmd
