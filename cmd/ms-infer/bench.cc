// `ms-infer bench`: offline throughput of the continuous-batching engine in the form vLLM's
// benchmark_throughput prints (requests/s, total and output tokens/s) with time-to-first-token
// and time-per-output-token percentiles, then a sweep over batch sizes like llama.cpp's
// batched-bench (prompt processing and token generation timed separately), with decode speed
// set against the memory-bandwidth bound: the bytes a decode step reads (weights and KV cache)
// over the bandwidth of a STREAM-like copy measured in the same run. Under mpirun the throughput
// run is served by every rank (colocated replicas, or attention and expert ranks with
// --attention-ranks), with each rank's role, pipeline idle fraction and token traffic; the sweep
// runs on one process. With --draft-model the throughput run is made twice, by the target alone and
// speculatively, and the speedup of the output token rate is printed. The measurements live in
// lib/infer/bench.h; this file parses options and prints.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "cmd/ms-infer/serving_flags.h"
#include "infer/bench.h"
#include "infer/engine.h"
#include "infer/model_loader.h"
#include "infer/serving.h"

namespace ms::infer_cmd {
namespace {

struct BenchArgs {
  std::string model, checkpoint;
  int64_t num_prompts = 32, input_len = 32, output_len = 32;
  double temperature = 0;  // of the throughput run's requests (0: greedy), seeded by index
  std::vector<int64_t> batch_sizes = {1, 2, 4, 8, 16};
  double stream_mib = 256;
  int64_t repetitions = 1;      // of each sweep row
  infer::ServeOptions serving;  // engine sizes and the ranks' roles
};

// Serves the random requests (speculatively when `draft` is set) and prints the summary;
// returns the output tokens per second (rank 0; 0 elsewhere).
Result<double> run_throughput(const BenchArgs& a, infer::LoadedModel& m, infer::LoadedModel* draft,
                              comm::Communicator& world) {
  const int64_t V = m.model->config().vocab_size;
  std::vector<infer::Request> reqs;
  for (int64_t i = 0; i < a.num_prompts; ++i) {
    infer::Request r;
    r.id = std::to_string(i);
    r.prompt = infer::random_prompt(a.input_len, V, static_cast<uint64_t>(i));
    r.max_tokens = a.output_len;
    r.sampling.temperature = a.temperature;
    r.sampling.seed = static_cast<uint64_t>(i);
    reqs.push_back(std::move(r));
  }
  MS_ASSIGN_OR_RETURN(infer::ServeResult result,
                      infer::serve(m, reqs, a.serving, world, {}, draft));
  if (world.rank() != 0) return 0.0;
  MS_ASSIGN_OR_RETURN(std::string summary, infer::format_throughput(result));
  std::fputs(summary.c_str(), stdout);
  if (world.size() > 1) std::printf("%s", infer::describe(result).c_str());
  if (draft != nullptr) {
    std::fputs(infer::describe_speculation(result, a.serving.engine.draft_tokens).c_str(), stdout);
  }
  double out_tokens = 0;
  for (const infer::Completion& c : result.completions) {
    out_tokens += static_cast<double>(c.tokens.size());
  }
  return out_tokens / std::max(result.seconds, 1e-12);
}

// Without a draft: one throughput run. With one: the same requests served by the target alone,
// then speculatively, and the ratio of their output token rates.
Status run_throughputs(const BenchArgs& a, infer::LoadedModel& m, infer::LoadedModel* draft,
                       comm::Communicator& world) {
  if (draft == nullptr) return run_throughput(a, m, nullptr, world).status();
  if (world.rank() == 0) std::printf("without the draft:\n");
  MS_ASSIGN_OR_RETURN(const double alone, run_throughput(a, m, nullptr, world));
  if (world.rank() == 0) {
    std::printf("with the draft (--draft-tokens %lld):\n",
                static_cast<long long>(a.serving.engine.draft_tokens));
  }
  MS_ASSIGN_OR_RETURN(const double speculative, run_throughput(a, m, draft, world));
  if (world.rank() == 0) {
    std::printf("speculative speedup: %.2fx output tokens/s (%.2f vs %.2f)\n",
                speculative / std::max(alone, 1e-12), speculative, alone);
  }
  return Status::OK();
}

Status run_sweep(const BenchArgs& a, infer::LoadedModel& m) {
  infer::SweepOptions options;
  options.input_len = a.input_len;
  options.output_len = a.output_len;
  options.batch_sizes = a.batch_sizes;
  options.block_size = a.serving.engine.block_size;
  options.stream_mib = a.stream_mib;
  options.repetitions = a.repetitions;
  options.weight_bytes = infer::decode_weight_bytes(m);
  MS_ASSIGN_OR_RETURN(infer::SweepResult sweep, infer::run_batch_sweep(*m.model, options));
  std::fputs(infer::format_sweep(sweep, options).c_str(), stdout);
  return Status::OK();
}

Result<int> bench_in_world(const BenchArgs& a, comm::Communicator& world) {
  MS_ASSIGN_OR_RETURN(infer::LoadedModel m,
                      infer::load_for_serving(a.model, a.checkpoint, a.serving, world));
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
  std::optional<infer::LoadedModel> draft;
  if (!a.serving.draft_model.empty()) {
    MS_ASSIGN_OR_RETURN(draft, infer::load_draft_for_serving(a.serving, m, world));
  }
  MS_RETURN_IF_ERROR(run_throughputs(a, m, draft ? &*draft : nullptr, world));
  if (world.size() == 1) MS_RETURN_IF_ERROR(run_sweep(a, m));
  return 0;
}

Result<int> run_bench(const BenchArgs& a) {
  if (a.num_prompts < 1 || a.input_len < 1 || a.output_len < 2) {
    return InvalidArgument(
        "--num-prompts and --input-len must be at least 1, --output-len at least 2");
  }
  MS_RETURN_IF_ERROR(check_draft_flags(a.serving));
  return cli::run_in_world([&](comm::MpiCommunicator& world) { return bench_in_world(a, world); });
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
  sub->add_option("--temperature", a->temperature,
                  "Sampling temperature of the throughput run (0: greedy; request i has seed i)")
      ->capture_default_str();
  sub->add_option("--input-len", a->input_len, "Prompt tokens per request (PP)")
      ->capture_default_str();
  sub->add_option("--output-len", a->output_len, "Generated tokens per request (TG)")
      ->capture_default_str();
  add_serving_flags(sub, a->serving);
  sub->add_option("--batch-sizes", a->batch_sizes, "Batch sizes of the sweep")->delimiter(',');
  sub->add_option("--stream-mib", a->stream_mib,
                  "Size of the read probe's buffer (at least 4x the last-level cache) and of each "
                  "array of the copy")
      ->capture_default_str();
  sub->add_option("--repetitions", a->repetitions,
                  "Times each batch size of the sweep is run; the table shows the run with the "
                  "fastest decode (the copy is best of 5 too), a line below it the spread")
      ->check(cli::kPositiveNumber)
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(bench, add_bench_command);

}  // namespace ms::infer_cmd
