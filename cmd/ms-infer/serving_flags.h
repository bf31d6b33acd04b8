// The flags `ms-infer generate` and `ms-infer bench` share: the engine's sizes and how the
// ranks of an mpirun job serve (infer/serving.h).
#pragma once

#include <CLI/CLI.hpp>

#include "infer/serving.h"

namespace ms::infer_cmd {

// Adds --max-batch, --kv-blocks, --block-size, --attention-ranks and --micro-batches, bound to
// `o`, whose current values are the defaults shown.
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
}

}  // namespace ms::infer_cmd
