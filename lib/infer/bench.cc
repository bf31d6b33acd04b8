// `ms-infer bench`'s measurements; see bench.h.
#include "infer/bench.h"

#include <algorithm>
#include <cstdio>
#include <optional>

#include "core/memory_bandwidth.h"
#include "core/philox.h"
#include "core/timer.h"
#include "infer/kv_cache.h"
#include "infer/sampler.h"
#include "ops/parallel.h"

namespace ms::infer {

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float u = uniform(seed, stream_id("ms.infer.bench.prompt"), static_cast<uint64_t>(i));
    t[i] = std::min<int32_t>(static_cast<int32_t>(u * static_cast<float>(vocab)),
                             static_cast<int32_t>(vocab - 1));
  }
  return t;
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(i, values.size() - 1)];
}

double decode_weight_bytes(const model::Transformer& model) {
  const config::ModelConfig& c = model.config();
  const double embedding = c.tie_embeddings ? 0.0 : static_cast<double>(c.vocab_size * c.d_model);
  return 4.0 * (static_cast<double>(model.active_parameter_count()) - embedding);
}

double decode_weight_bytes(const LoadedModel& served) {
  const ServingWeightStats& s = served.serving_weights;
  const model::Transformer& m = *served.model;
  const config::ModelConfig& c = m.config();
  // A token reads top_k of the num_experts routed experts, all of them the same size.
  const double routed_share =
      c.moe.num_experts > 0 ? static_cast<double>(c.moe.top_k) / c.moe.num_experts : 0.0;
  const double f32 = static_cast<double>(s.f32_bytes - s.routed_f32_bytes) +
                     routed_share * static_cast<double>(s.routed_f32_bytes);
  const double quantized = static_cast<double>(s.quantized_bytes - s.routed_quantized_bytes) +
                           routed_share * static_cast<double>(s.routed_quantized_bytes);
  return decode_weight_bytes(m) - f32 + quantized;
}

double decode_kv_bytes(const config::ModelConfig& c, int64_t input_len, int64_t output_len) {
  if (output_len < 2) return 0;
  double positions = 0;
  for (int64_t step = 1; step < output_len; ++step) {
    const int64_t attended = input_len + step;
    positions +=
        static_cast<double>(c.sliding_window > 0 ? std::min(attended, c.sliding_window) : attended);
  }
  const double per_position = 2.0 * static_cast<double>(c.n_layers * c.n_kv_heads) *
                              static_cast<double>(c.d_model / c.n_heads) * sizeof(float);
  return per_position * positions / static_cast<double>(output_len - 1);
}

Result<std::string> format_throughput(const ServeResult& result) {
  const double seconds = result.seconds;
  double in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot;
  for (const Completion& c : result.completions) {
    if (c.finish_reason == "error") return InvalidArgument("request refused: " + c.error);
    in_tokens += static_cast<double>(c.prompt_tokens);
    out_tokens += static_cast<double>(c.tokens.size());
    ttft.push_back(c.ttft_ms);
    if (c.tokens.size() > 1) {
      tpot.push_back((c.latency_ms - c.ttft_ms) / static_cast<double>(c.tokens.size() - 1));
    }
  }
  char text[512];
  std::snprintf(text, sizeof(text),
                "Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n"
                "TTFT ms: p50 %.2f  p90 %.2f  p99 %.2f\nTPOT ms: p50 %.2f  p90 %.2f  p99 %.2f\n",
                static_cast<double>(result.completions.size()) / seconds,
                (in_tokens + out_tokens) / seconds, out_tokens / seconds, percentile(ttft, 50),
                percentile(ttft, 90), percentile(ttft, 99), percentile(tpot, 50),
                percentile(tpot, 90), percentile(tpot, 99));
  return std::string(text);
}

namespace {

// B sequences of pp prompt tokens prefilled in one step, then tg - 1 batched decode steps.
Result<SweepRow> time_batch(model::Transformer& model, int64_t B, int64_t pp, int64_t tg,
                            int64_t block_size) {
  KvCache cache(model.config(), B * ((pp + tg + block_size - 1) / block_size), block_size);
  std::vector<std::vector<int32_t>> tokens, blocks;
  for (int64_t b = 0; b < B; ++b) {
    tokens.push_back(random_prompt(pp, model.config().vocab_size, 1000 + b));
    // The cache is sized for exactly these sequences, so allocation cannot run short.
    std::optional<std::vector<int32_t>> owned =
        cache.allocator().allocate(cache.blocks_for(pp + tg));
    if (!owned) return Internal("bench: the KV cache sized for the batch ran out of blocks");
    blocks.push_back(std::move(*owned));
  }
  std::vector<model::CachedChunk> chunks;
  for (int64_t b = 0; b < B; ++b) chunks.push_back({tokens[b], 0, blocks[b]});
  SweepRow row;
  row.batch = B;
  Stopwatch w;
  MS_ASSIGN_OR_RETURN(Tensor logits, model.forward_cached(chunks, cache.view()));
  row.t_pp = w.elapsed_s();
  w.reset();
  const int64_t V = model.config().vocab_size;
  for (int64_t step = 1; step < tg; ++step) {
    if (first_non_finite_row(logits.data<float>(), B, V) >= 0) {
      return FailedPrecondition("bench: the logits of decode step " + std::to_string(step) +
                                " at batch " + std::to_string(B) +
                                " are not finite (inf or NaN): the model's weights or "
                                "quantization scales overflow float32");
    }
    for (int64_t b = 0; b < B; ++b) {
      tokens[b].assign(1, argmax(logits.data<float>() + b * V, V));
      chunks[b] = {tokens[b], pp + step - 1, blocks[b]};
    }
    MS_ASSIGN_OR_RETURN(logits, model.forward_cached(chunks, cache.view()));
  }
  row.t_tg = w.elapsed_s();
  return row;
}

}  // namespace

Result<SweepResult> run_batch_sweep(model::Transformer& model, const SweepOptions& options) {
  SweepResult result;
  const size_t stream_bytes = static_cast<size_t>(options.stream_mib * 1024 * 1024);
  // The decode's threads read a buffer the caches cannot hold: 5 passes first, then 2 after
  // each decode run, so that the bound, the best pass, is taken over the same minutes as the
  // decode's best run.
  result.read_threads = ops::num_threads();
  ReadProbe probe(std::max(stream_bytes, 4 * last_level_cache_bytes()), result.read_threads);
  result.read_probe_bytes = static_cast<double>(probe.bytes());
  probe.run(5);
  result.copy_bytes_s =
      measure_stream_gbs(StreamKernel::kCopy, stream_bytes / sizeof(double), 5) * 1e9;
  result.weight_bytes =
      options.weight_bytes > 0 ? options.weight_bytes : decode_weight_bytes(model);
  result.kv_bytes = decode_kv_bytes(model.config(), options.input_len, options.output_len);
  result.row_bytes = static_cast<double>(model.config().d_model) * sizeof(float);
  result.linear_params = decode_weight_bytes(model) / 4;
  const double steps = static_cast<double>(options.output_len - 1);
  for (int64_t B : options.batch_sizes) {
    SweepRow best;
    for (int64_t rep = 0; rep < std::max<int64_t>(options.repetitions, 1); ++rep) {
      MS_ASSIGN_OR_RETURN(SweepRow row, time_batch(model, B, options.input_len, options.output_len,
                                                   options.block_size));
      probe.run(2);
      best.decode_steps_s.push_back(row.t_tg > 0 ? steps / row.t_tg : 0);
      if (rep == 0 || row.t_tg < best.t_tg) {
        best.batch = row.batch;
        best.t_pp = row.t_pp;
        best.t_tg = row.t_tg;
      }
    }
    result.rows.push_back(std::move(best));
  }
  result.read_bytes_s = probe.best_gbs() * 1e9;
  result.read_worst_bytes_s = probe.worst_gbs() * 1e9;
  result.read_passes = probe.passes();
  return result;
}

std::string format_sweep(const SweepResult& result, const SweepOptions& options) {
  const int64_t pp = options.input_len, tg = options.output_len;
  char line[640];
  std::snprintf(line, sizeof(line),
                "\nread bandwidth (%d threads, %.0f MiB, best of %d passes taken between the "
                "decode runs, worst %.2f): %.2f GB/s; copy bandwidth "
                "(1 thread, %.0f MiB arrays, read + write counted): %.2f GB/s\n"
                "weight bytes per decode step: %.2f MB; KV cache bytes per decode step and "
                "sequence: %.2f MB; embedding row: %.4f MB; read bound at B=1 %.1f steps/s\n",
                result.read_threads, result.read_probe_bytes / (1024 * 1024),
                result.read_passes, result.read_worst_bytes_s / 1e9, result.read_bytes_s / 1e9,
                options.stream_mib, result.copy_bytes_s / 1e9,
                result.weight_bytes / 1e6, result.kv_bytes / 1e6, result.row_bytes / 1e6,
                result.bound_steps_s(1));
  std::string out = line;
  out +=
      "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s | "
      "steps/s | of read bound |      T s |    S t/s | PP GFLOP/s | of copy bound |\n"
      "|-------|--------|------|--------|----------|----------|----------|----------|"
      "---------|---------------|----------|----------|------------|---------------|\n";
  for (const SweepRow& r : result.rows) {
    const double steps = static_cast<double>(tg - 1);
    const double steps_per_s = r.t_tg > 0 ? steps / r.t_tg : 0;
    const double total = r.t_pp + r.t_tg;
    const int64_t B = r.batch;
    std::snprintf(
        line, sizeof(line),
        "| %5lld | %6lld | %4lld | %6lld | %8.3f | %8.1f | %8.3f | %8.1f | %7.1f | %12.1f%% | "
        "%8.3f | %8.1f | %10.1f | %12.1f%% |\n",
        static_cast<long long>(pp), static_cast<long long>(tg), static_cast<long long>(B),
        static_cast<long long>(B * (pp + tg)), r.t_pp, static_cast<double>(B * pp) / r.t_pp, r.t_tg,
        static_cast<double>(B) * steps / std::max(r.t_tg, 1e-12), steps_per_s,
        100.0 * steps_per_s / result.bound_steps_s(B), total,
        static_cast<double>(B * (pp + tg - 1)) / total,
        2.0 * result.linear_params * static_cast<double>(B * pp) / std::max(r.t_pp, 1e-12) / 1e9,
        100.0 * steps_per_s / result.copy_bound_steps_s(B));
    out += line;
  }
  for (const SweepRow& r : result.rows) {
    if (r.decode_steps_s.size() < 2) continue;
    std::snprintf(line, sizeof(line),
                  "B=%lld: decode steps/s over %zu runs: min %.1f, median %.1f, max %.1f\n",
                  static_cast<long long>(r.batch), r.decode_steps_s.size(),
                  percentile(r.decode_steps_s, 0), percentile(r.decode_steps_s, 50),
                  percentile(r.decode_steps_s, 100));
    out += line;
  }
  return out;
}

}  // namespace ms::infer
