// The measurements of `ms-infer bench`: a throughput summary of a served batch in the form
// vLLM's benchmark_throughput prints, and a batch-size sweep like llama.cpp's batched-bench
// (prompt processing and token generation timed apart) set against the memory-bandwidth bound:
// the bytes one decode step reads (weights and KV cache) over the STREAM copy bandwidth
// measured in the same run (core/memory_bandwidth.h). cmd/ms-infer/bench.cc only parses options and
// prints.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"
#include "infer/serving.h"
#include "model/transformer.h"

namespace ms::infer {

// `n` token ids in [0, vocab), a pure function of `seed`.
std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed);

// The p-th percentile (0..100, nearest rank) of `values`; 0 when empty.
double percentile(std::vector<double> values, double p);

// f32 weight bytes one decode step of one sequence reads: every matrix a token passes through
// (the embedding contributes one row, so only a separate lm_head counts).
double decode_weight_bytes(const model::Transformer& model);
// The same with the linear weights `served` converted (serving_weights.h): their f32 bytes
// replaced by their quantized bytes (of the routed experts, the top_k a token reads).
double decode_weight_bytes(const LoadedModel& served);

// KV cache bytes one decode step of one sequence reads, averaged over the steps of a sweep
// row: step s = 1 .. output_len - 1 attends over input_len + s cached positions (at most the
// sliding window), each holding keys and values of every layer's kv heads in f32.
double decode_kv_bytes(const config::ModelConfig& c, int64_t input_len, int64_t output_len);

// Requests/s, tokens/s and time-to-first-token / time-per-output-token percentiles of a served
// batch. InvalidArgument naming the request when one was refused.
Result<std::string> format_throughput(const ServeResult& result);

struct SweepOptions {
  int64_t input_len = 32, output_len = 32;  // PP and TG (output_len >= 2)
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8, 16};
  int64_t block_size = 16;  // KV cache block size
  double stream_mib = 256;  // size of each array of the bandwidth-measuring copy
  // Runs of each batch size: the row kept is the one with the fastest decode, as the copy
  // keeps its best of 5; every run's decode steps/s is kept beside it.
  int64_t repetitions = 1;
  // Weight bytes one decode step reads; 0: decode_weight_bytes(model), the f32 count. Served
  // with --weights, the caller passes decode_weight_bytes(served).
  double weight_bytes = 0;
};

struct SweepRow {
  int64_t batch = 0;
  double t_pp = 0, t_tg = 0;  // seconds: one prefill of B x PP tokens; TG - 1 decode steps
  std::vector<double> decode_steps_s;  // every repetition's decode steps/s, in run order
};

struct SweepResult {
  double bandwidth_bytes_s = 0;  // STREAM copy, read + write counted
  double weight_bytes = 0;       // per decode step (SweepOptions::weight_bytes)
  double kv_bytes = 0;           // per decode step and sequence (decode_kv_bytes)
  // Weights a token multiplies through in the linear layers (decode_weight_bytes(model) / 4,
  // whatever their format): a prefill's linear FLOPs are 2 x this x its tokens.
  double linear_params = 0;
  std::vector<SweepRow> rows;  // one per batch size, in order
  // Decode steps/s the memory allows at `batch` sequences: every byte a step reads (the
  // weights once, each sequence's KV cache) over the copy bandwidth.
  double bound_steps_s(int64_t batch) const {
    return bandwidth_bytes_s / (weight_bytes + static_cast<double>(batch) * kv_bytes);
  }
};

// Measures the copy bandwidth, then for each batch size B prefills B random prompts of
// input_len tokens in one step and runs output_len - 1 batched greedy decode steps.
Result<SweepResult> run_batch_sweep(model::Transformer& model, const SweepOptions& options);

// The sweep as a Markdown table with the bandwidth line above it, and with more than one
// repetition, each batch size's decode steps/s over the repetitions (min, median, max) below.
std::string format_sweep(const SweepResult& result, const SweepOptions& options);

}  // namespace ms::infer
