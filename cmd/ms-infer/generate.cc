// `ms-infer generate`: batch generation from a JSON-lines prompts file to a JSON-lines output in
// input order, through the continuous-batching engine (lib/infer). A malformed line, or a prompt
// the model cannot serve, gets an output line with finish_reason "error" and the reason, and the
// rest are still served. Without --prompts, one prompt from --prompt or stdin is completed and
// printed, for quick checks. Under mpirun the requests are shared by the ranks (colocated
// replicas, or attention and expert ranks with --attention-ranks; infer/serving.h) and rank 0
// writes the output.
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "cmd/ms-infer/serving_flags.h"
#include "comm/variable_length.h"
#include "core/timer.h"
#include "infer/engine.h"
#include "infer/model_loader.h"
#include "infer/request_json.h"
#include "infer/serving.h"
#include "io/atomic_file.h"
#include "io/output_path.h"

namespace ms::infer_cmd {
namespace {

using nlohmann::ordered_json;

struct GenerateArgs {
  std::string model, checkpoint, prompts, output, prompt;
  infer::ServeOptions serving;  // engine sizes and the ranks' roles
  infer::Request defaults;  // max_tokens, sampling
  bool progress = true;
};

// Every rank parses the file; `report` (rank 0) says which lines are skipped.
Result<infer::ParsedPrompts> read_prompts(const GenerateArgs& a, const data::Tokenizer& tok,
                                          bool report) {
  MS_ASSIGN_OR_RETURN(std::string text,
                      io::read_file(a.prompts, io::kMaxTextFileBytes, "prompts file"));
  infer::ParsedPrompts p = infer::parse_prompts(text, a.prompts, tok, a.defaults);
  if (report) {
    for (const infer::Completion& c : p.refused) {
      std::fprintf(stderr, "ms-infer generate: %s (skipped)\n", c.error.c_str());
    }
  }
  return p;
}

// Prints "\rgenerate: done/total requests | N output tok/s" as requests finish.
std::function<void(const infer::Completion&)> progress_printer(size_t total, bool enabled) {
  if (!enabled) return {};
  auto done = std::make_shared<size_t>(0);
  auto tokens = std::make_shared<size_t>(0);
  auto clock = std::make_shared<Stopwatch>();
  return [=](const infer::Completion& c) {
    ++*done;
    *tokens += c.tokens.size();
    std::fprintf(stderr, "\rgenerate: %zu/%zu requests | %.1f output tok/s", *done, total,
                 static_cast<double>(*tokens) / std::max(clock->elapsed_s(), 1e-9));
    if (*done == total) std::fprintf(stderr, "\n");
  };
}

// Serves the requests over every rank (speculatively when `draft` is set); rank 0's progress
// line counts its own share.
Result<infer::ServeResult> serve_all(const GenerateArgs& a, infer::LoadedModel& m,
                                     infer::LoadedModel* draft,
                                     const std::vector<infer::Request>& requests,
                                     comm::Communicator& world) {
  const infer::ServeOptions& o = a.serving;
  const size_t servers = static_cast<size_t>(o.attention_ranks > 0 ? o.attention_ranks
                                                                   : world.size());
  const size_t share = (requests.size() + servers - 1) / servers;
  MS_ASSIGN_OR_RETURN(
      infer::ServeResult result,
      infer::serve(m, requests, o, world, progress_printer(share, a.progress && world.rank() == 0),
                   draft));
  if (world.rank() == 0 && world.size() > 1) {
    std::fprintf(stderr, "%s", infer::describe(result).c_str());
  }
  if (world.rank() == 0 && draft != nullptr) {
    std::fprintf(stderr, "%s",
                 infer::describe_speculation(result, o.engine.draft_tokens).c_str());
  }
  return result;
}

Result<int> run_file(const GenerateArgs& a, infer::LoadedModel& m, infer::LoadedModel* draft,
                     comm::Communicator& world) {
  MS_ASSIGN_OR_RETURN(infer::ParsedPrompts p, read_prompts(a, *m.tokenizer, world.rank() == 0));
  MS_ASSIGN_OR_RETURN(infer::ServeResult result, serve_all(a, m, draft, p.requests, world));
  if (world.rank() != 0) return 0;
  std::string lines;
  for (int64_t s : p.slot) {
    const infer::Completion& c = s >= 0 ? result.completions[s] : p.refused[-1 - s];
    lines += infer::completion_json(c, infer::CompletionForm::kOutputLine)
                 .dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n";
  }
  MS_RETURN_IF_ERROR(io::write_file_atomic(a.output, lines));
  return 0;
}

// The prompt from --prompt, or from stdin on rank 0 (mpirun forwards stdin there) sent to all.
Result<std::string> one_prompt(const GenerateArgs& a, comm::Communicator& world) {
  if (!a.prompt.empty()) return a.prompt;
  std::string text;
  if (world.rank() == 0) {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
    if (!text.empty() && text.back() == '\n') text.pop_back();  // the newline echo adds
  }
  MS_RETURN_IF_ERROR(comm::broadcast_variable(world, text, 0));
  return text;
}

Result<int> run_one(const GenerateArgs& a, infer::LoadedModel& m, infer::LoadedModel* draft,
                    comm::Communicator& world) {
  MS_ASSIGN_OR_RETURN(const std::string text, one_prompt(a, world));
  infer::Request r = a.defaults;
  r.id = "prompt";
  r.prompt = m.tokenizer->encode(text);
  GenerateArgs quiet = a;
  quiet.progress = false;
  MS_ASSIGN_OR_RETURN(infer::ServeResult result, serve_all(quiet, m, draft, {r}, world));
  if (world.rank() != 0) return 0;
  const infer::Completion& c = result.completions[0];
  if (c.finish_reason == "error") return InvalidArgument("prompt refused: " + c.error);
  std::printf("%s\n", c.text.c_str());
  return 0;
}

Result<int> generate_in_world(const GenerateArgs& a, comm::Communicator& world) {
  MS_ASSIGN_OR_RETURN(infer::LoadedModel m,
                      infer::load_for_serving(a.model, a.checkpoint, a.serving, world));
  std::optional<infer::LoadedModel> draft;
  if (!a.serving.draft_model.empty()) {
    MS_ASSIGN_OR_RETURN(draft, infer::load_draft_for_serving(a.serving, m, world));
  }
  infer::LoadedModel* d = draft ? &*draft : nullptr;
  return a.prompts.empty() ? run_one(a, m, d, world) : run_file(a, m, d, world);
}

Result<int> run_generate(const GenerateArgs& a) {
  if (!a.prompts.empty() && a.output.empty()) {
    return InvalidArgument("--prompts needs --output for the completions");
  }
  if (!a.prompts.empty()) {
    MS_RETURN_IF_ERROR(io::check_output_is_not_an_input(a.output, {{a.prompts}, "--output"}));
  }
  MS_RETURN_IF_ERROR(check_draft_flags(a.serving));
  return cli::run_in_world(
      [&](comm::MpiCommunicator& world) { return generate_in_world(a, world); });
}

void add_generate_command(cli::Tool& tool) {
  auto a = std::make_shared<GenerateArgs>();
  a->defaults.max_tokens = 64;
  a->serving.engine.kv_blocks = 1024;
  CLI::App* sub = tool.add_subcommand(
      "generate", "Generate completions for a JSON-lines prompts file (or one prompt)",
      [a] { return run_generate(*a); });
  sub->add_option("--model", a->model,
                  "Hugging Face model directory (config.json, model.safetensors or "
                  "model.safetensors.index.json and the files it names, tokenizer.json)");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Training checkpoint (step dir, checkpoints dir or latest file)");
  sub->add_option(
      "--prompts", a->prompts,
      "JSON-lines prompts: {id, prompt, max_tokens, temperature, top_p, top_k, seed, stop}");
  sub->add_option("--output,-o", a->output, "JSON-lines completions, in input order");
  sub->add_option("--prompt", a->prompt, "One prompt to complete and print (default: read stdin)");
  add_serving_flags(sub, a->serving);
  sub->add_option("--max-tokens", a->defaults.max_tokens, "Default max_tokens")
      ->capture_default_str();
  sub->add_option("--temperature", a->defaults.sampling.temperature,
                  "Default temperature (0: greedy)")
      ->capture_default_str();
  sub->add_option("--top-p", a->defaults.sampling.top_p, "Default top_p")->capture_default_str();
  sub->add_option("--top-k", a->defaults.sampling.top_k, "Default top_k (0: off)")
      ->capture_default_str();
  sub->add_option("--seed", a->defaults.sampling.seed, "Default seed")->capture_default_str();
  sub->add_flag("!--no-progress", a->progress, "Do not print the progress line");
}

}  // namespace

MS_CLI_COMMAND(generate, add_generate_command);

}  // namespace ms::infer_cmd
