// The measurements of `ms-infer bench`: a throughput summary of a served batch in the form
// vLLM's benchmark_throughput prints, and a batch-size sweep like llama.cpp's batched-bench
// (prompt processing and token generation timed apart) set against the memory-bandwidth bound:
// the bytes one decode step reads (weights with their scales, KV cache, embedding row) over the
// read bandwidth measured in the same run with the decode's threads, between its decode runs
// (core/memory_bandwidth.h, ReadProbe). A step reads and hardly writes, so read bandwidth is
// its limit; the one-thread STREAM copy figure of earlier runs is kept beside it, labelled, for
// comparison. cmd/ms-infer/bench.cc only parses options and prints.
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
  // Size of the read probe's buffer (raised to 4x the last-level cache when smaller) and of
  // each array of the copy.
  double stream_mib = 256;
  // Runs of each batch size: the row kept is the one with the fastest decode, as the probes
  // keep their best of 5; every run's decode steps/s is kept beside it.
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
  // The read probe (core/memory_bandwidth.h, ReadProbe) with the decode's threads, its passes
  // taken before and between the decode runs: the best is the bound, the worst shows how much
  // the machine moved while the sweep ran.
  double read_bytes_s = 0;
  double read_worst_bytes_s = 0;
  int read_passes = 0;
  int read_threads = 0;
  double read_probe_bytes = 0;   // the read probe's buffer
  double copy_bytes_s = 0;       // STREAM copy on one thread, read + write counted (labelled)
  double weight_bytes = 0;       // per decode step (SweepOptions::weight_bytes)
  double kv_bytes = 0;           // per decode step and sequence (decode_kv_bytes)
  double row_bytes = 0;          // per decode step and sequence: its token's embedding row
  // Weights a token multiplies through in the linear layers (decode_weight_bytes(model) / 4,
  // whatever their format): a prefill's linear FLOPs are 2 x this x its tokens.
  double linear_params = 0;
  std::vector<SweepRow> rows;  // one per batch size, in order
  // Bytes one decode step reads at `batch` sequences: the weights once, each sequence's KV
  // cache and embedding row.
  double step_bytes(int64_t batch) const {
    return weight_bytes + static_cast<double>(batch) * (kv_bytes + row_bytes);
  }
  // Decode steps/s the memory allows at `batch` sequences: step_bytes over the read bandwidth.
  double bound_steps_s(int64_t batch) const { return read_bytes_s / step_bytes(batch); }
  // The same over the copy bandwidth: the yardstick of earlier runs, for comparison only.
  double copy_bound_steps_s(int64_t batch) const { return copy_bytes_s / step_bytes(batch); }
};

// Measures the read and copy bandwidths, then for each batch size B prefills B random prompts of
// input_len tokens in one step and runs output_len - 1 batched greedy decode steps.
Result<SweepResult> run_batch_sweep(model::Transformer& model, const SweepOptions& options);

// The sweep as a Markdown table with the bandwidth line above it (steps/s as a share of the
// read bound, and in the last column of the copy bound), and with more than one
// repetition, each batch size's decode steps/s over the repetitions (min, median, max) below.
std::string format_sweep(const SweepResult& result, const SweepOptions& options);

}  // namespace ms::infer
