// `ms-infer bench`: offline throughput of the continuous-batching engine in the form vLLM's
// benchmark_throughput prints (requests/s, total and output tokens/s) with time-to-first-token
// and time-per-output-token percentiles, then a sweep over batch sizes like llama.cpp's
// batched-bench (prompt processing and token generation timed separately), with decode speed
// set against the memory-bandwidth bound: weight bytes read per decode step over the bandwidth
// of a STREAM-like copy measured in the same run. Under mpirun the throughput run is served by
// every rank (colocated replicas, or attention and expert ranks with --attention-ranks), with
// each rank's role, pipeline idle fraction and token traffic; the sweep runs on one process.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "cmd/ms-infer/serving_flags.h"
#include "core/philox.h"
#include "core/timer.h"
#include "infer/engine.h"
#include "infer/model_loader.h"
#include "infer/serving.h"

namespace ms::infer_cmd {
namespace {

struct BenchArgs {
  std::string model, checkpoint;
  int64_t num_prompts = 32, input_len = 32, output_len = 32;
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8, 16};
  double stream_mib = 256;
  infer::ServeOptions serving;  // engine sizes and the ranks' roles
};

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float u = uniform(seed, stream_id("ms.infer.bench.prompt"), static_cast<uint64_t>(i));
    t[i] = std::min<int32_t>(static_cast<int32_t>(u * static_cast<float>(vocab)),
                             static_cast<int32_t>(vocab - 1));
  }
  return t;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Bytes/s of a large memcpy (read + write counted), best of 5: the STREAM "copy" kernel.
double measure_copy_bandwidth(double mib) {
  const size_t n = static_cast<size_t>(mib * 1024 * 1024);
  std::vector<char> a(n, 1), b(n, 0);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    Stopwatch w;
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, w.elapsed_s());
    a[rep] = b[n - 1 - rep];
  }
  return 2.0 * static_cast<double>(n) / best;
}

// f32 weight bytes one decode step of one sequence reads: every matrix a token passes through
// (the embedding contributes one row, so only a separate lm_head counts).
double decode_weight_bytes(const model::Transformer& m) {
  const config::ModelConfig& c = m.config();
  const double embedding = c.tie_embeddings ? 0.0 : static_cast<double>(c.vocab_size * c.d_model);
  return 4.0 * (static_cast<double>(m.active_parameter_count()) - embedding);
}

Status run_throughput(const BenchArgs& a, infer::LoadedModel& m, comm::Communicator& world) {
  const int64_t V = m.model->config().vocab_size;
  std::vector<infer::Request> reqs;
  for (int64_t i = 0; i < a.num_prompts; ++i) {
    infer::Request r;
    r.id = std::to_string(i);
    r.prompt = random_tokens(a.input_len, V, static_cast<uint64_t>(i));
    r.max_tokens = a.output_len;
    reqs.push_back(std::move(r));
  }
  MS_ASSIGN_OR_RETURN(infer::ServeResult result, infer::serve(m, reqs, a.serving, world));
  if (world.rank() != 0) return Status::OK();
  const double seconds = result.seconds;
  double in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot;
  for (const infer::Completion& c : result.completions) {
    if (c.finish_reason == "error") return InvalidArgument("request refused: " + c.error);
    in_tokens += static_cast<double>(c.prompt_tokens);
    out_tokens += static_cast<double>(c.tokens.size());
    ttft.push_back(c.ttft_ms);
    if (c.tokens.size() > 1) {
      tpot.push_back((c.latency_ms - c.ttft_ms) / static_cast<double>(c.tokens.size() - 1));
    }
  }
  std::printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
              static_cast<double>(result.completions.size()) / seconds,
              (in_tokens + out_tokens) / seconds, out_tokens / seconds);
  std::printf("TTFT ms: p50 %.2f  p90 %.2f  p99 %.2f\n", percentile(ttft, 50), percentile(ttft, 90),
              percentile(ttft, 99));
  std::printf("TPOT ms: p50 %.2f  p90 %.2f  p99 %.2f\n", percentile(tpot, 50), percentile(tpot, 90),
              percentile(tpot, 99));
  if (world.size() > 1) std::printf("%s", infer::describe(result).c_str());
  return Status::OK();
}

struct SweepRow {
  double t_pp = 0, t_tg = 0;
};

// B sequences of pp prompt tokens prefilled in one step, then tg - 1 batched decode steps.
Result<SweepRow> time_batch(model::Transformer& model, int64_t B, int64_t pp, int64_t tg,
                            int64_t block_size) {
  infer::KvCache cache(model.config(), B * ((pp + tg + block_size - 1) / block_size), block_size);
  std::vector<std::vector<int32_t>> tokens, blocks;
  for (int64_t b = 0; b < B; ++b) {
    tokens.push_back(random_tokens(pp, model.config().vocab_size, 1000 + b));
    blocks.push_back(*cache.allocator().allocate(cache.blocks_for(pp + tg)));
  }
  std::vector<model::CachedChunk> chunks;
  for (int64_t b = 0; b < B; ++b) chunks.push_back({tokens[b], 0, blocks[b]});
  SweepRow row;
  Stopwatch w;
  MS_ASSIGN_OR_RETURN(Tensor logits, model.forward_cached(chunks, cache.view()));
  row.t_pp = w.elapsed_s();
  w.reset();
  const int64_t V = model.config().vocab_size;
  for (int64_t step = 1; step < tg; ++step) {
    for (int64_t b = 0; b < B; ++b) {
      tokens[b].assign(1, infer::argmax(logits.data<float>() + b * V, V));
      chunks[b] = {tokens[b], pp + step - 1, blocks[b]};
    }
    MS_ASSIGN_OR_RETURN(logits, model.forward_cached(chunks, cache.view()));
  }
  row.t_tg = w.elapsed_s();
  return row;
}

Status run_sweep(const BenchArgs& a, infer::LoadedModel& m) {
  const double bandwidth = measure_copy_bandwidth(a.stream_mib);
  const double weight_bytes = decode_weight_bytes(*m.model);
  const double bound = bandwidth / weight_bytes;  // decode steps/s the memory allows
  std::printf(
      "\nmemory bandwidth (copy, %.0f MiB): %.2f GB/s; weight bytes per decode step: "
      "%.2f MB; bound %.1f steps/s\n",
      a.stream_mib, bandwidth / 1e9, weight_bytes / 1e6, bound);
  std::printf(
      "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s | "
      "steps/s | of bound |      T s |    S t/s |\n");
  std::printf(
      "|-------|--------|------|--------|----------|----------|----------|----------|"
      "---------|----------|----------|----------|\n");
  for (int64_t B : a.batch_sizes) {
    MS_ASSIGN_OR_RETURN(SweepRow r, time_batch(*m.model, B, a.input_len, a.output_len,
                                               a.serving.engine.block_size));
    const double steps = static_cast<double>(a.output_len - 1);
    const double steps_per_s = r.t_tg > 0 ? steps / r.t_tg : 0;
    const double total = r.t_pp + r.t_tg;
    std::printf(
        "| %5lld | %6lld | %4lld | %6lld | %8.3f | %8.1f | %8.3f | %8.1f | %7.1f | %7.1f%% | "
        "%8.3f | %8.1f |\n",
        static_cast<long long>(a.input_len), static_cast<long long>(a.output_len),
        static_cast<long long>(B), static_cast<long long>(B * (a.input_len + a.output_len)), r.t_pp,
        static_cast<double>(B * a.input_len) / r.t_pp, r.t_tg,
        static_cast<double>(B) * steps / std::max(r.t_tg, 1e-12), steps_per_s,
        100.0 * steps_per_s / bound, total,
        static_cast<double>(B * (a.input_len + a.output_len - 1)) / total);
  }
  return Status::OK();
}

Result<int> bench_in_world(const BenchArgs& a, comm::Communicator& world) {
  MS_ASSIGN_OR_RETURN(infer::LoadedModel m, infer::load_for_serving(a.model, a.checkpoint,
                                                                    a.serving, world));
  const config::ModelConfig& c = m.model->config();
  if (a.input_len + a.output_len > c.max_seq_len) {
    return InvalidArgument("--input-len + --output-len (" +
                           std::to_string(a.input_len + a.output_len) +
                           ") exceeds the model's context of " + std::to_string(c.max_seq_len));
  }
  if (world.rank() == 0) {
    std::printf("model: %lld parameters (%lld active), d_model %lld, %lld layers%s\n",
                static_cast<long long>(m.model->parameter_count()),
                static_cast<long long>(m.model->active_parameter_count()),
                static_cast<long long>(c.d_model), static_cast<long long>(c.n_layers),
                c.moe.num_experts > 0 ? ", MoE" : "");
  }
  MS_RETURN_IF_ERROR(run_throughput(a, m, world));
  if (world.size() == 1) MS_RETURN_IF_ERROR(run_sweep(a, m));
  return 0;
}

Result<int> run_bench(const BenchArgs& a) {
  if (a.num_prompts < 1 || a.input_len < 1 || a.output_len < 2) {
    return InvalidArgument(
        "--num-prompts and --input-len must be at least 1, --output-len at least 2");
  }
  return cli::run_in_world(
      [&](comm::MpiCommunicator& world) { return bench_in_world(a, world); });
}

void add_bench_command(cli::Tool& tool) {
  auto a = std::make_shared<BenchArgs>();
  a->serving.engine.kv_blocks = 1024;
  a->serving.engine.stop_at_eos = false;  // every request generates --output-len tokens
  CLI::App* sub = tool.add_subcommand(
      "bench", "Offline throughput, latency percentiles and a batch-size sweep on random prompts",
      [a] { return run_bench(*a); });
  sub->add_option("--model", a->model, "Hugging Face model directory");
  sub->add_option("--checkpoint", a->checkpoint, "Training checkpoint");
  sub->add_option("--num-prompts", a->num_prompts, "Requests in the throughput run")
      ->capture_default_str();
  sub->add_option("--input-len", a->input_len, "Prompt tokens per request (PP)")
      ->capture_default_str();
  sub->add_option("--output-len", a->output_len, "Generated tokens per request (TG)")
      ->capture_default_str();
  add_serving_flags(sub, a->serving);
  sub->add_option("--batch-sizes", a->batch_sizes, "Batch sizes of the sweep")->delimiter(',');
  sub->add_option("--stream-mib", a->stream_mib, "Size of the bandwidth-measuring copy")
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(bench, add_bench_command);

}  // namespace ms::infer_cmd
