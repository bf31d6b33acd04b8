// `ms-infer eval-ppl`: the perplexity of a model over held-out text, a Megatron dataset prefix
// (ms-data build) or a text file, cut into windows of --seq-len + 1 tokens (infer/perplexity.h).
// With --weights the linear weights are evaluated as that format holds them; a quantized model
// directory (ms-infer quantize) is evaluated as stored. One line on stdout, or JSON with --json,
// so one run per format gives the accuracy column of a quantization comparison.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cmd/common/registry.h"
#include "cmd/ms-infer/serving_flags.h"
#include "core/timer.h"
#include "infer/bit_allocation.h"
#include "infer/perplexity.h"
#include "infer/quantized_model.h"
#include "infer/token_windows.h"

namespace ms::infer_cmd {
namespace {

struct EvalArgs {
  std::string model, checkpoint, dataset;
  std::string reference_model, reference_checkpoint;  // for the KL column; both empty: none
  infer::WeightOptions weights;
  int64_t seq_len = 0, samples = 0, batch = 8;
  bool json = false;
};

Result<int> run_eval(const EvalArgs& a) {
  MS_ASSIGN_OR_RETURN(infer::EvalModel evaluated,
                      infer::load_for_evaluation(a.model, a.checkpoint, a.weights));
  infer::LoadedModel& m = evaluated.loaded;
  const config::ModelConfig& cfg = m.model->config();
  const int64_t len = a.seq_len > 0 ? a.seq_len : std::min<int64_t>(128, cfg.max_seq_len);
  MS_ASSIGN_OR_RETURN(const infer::TokenWindows windows,
                      infer::read_token_windows(a.dataset, *m.tokenizer, len, a.samples,
                                                cfg.vocab_size, "--seq-len"));
  const Stopwatch clock;
  MS_ASSIGN_OR_RETURN(const infer::PerplexityResult r,
                      infer::perplexity(*m.model, windows, a.batch, evaluated.forward));
  std::string weights = infer::format_label(a.weights);
  // int8 activations are evaluated through the serving kernels (the text line says so).
  const bool served = evaluated.forward == infer::EvalForward::kServing;
  const std::string activations = served ? "int8" : "f32";
  if (!a.model.empty()) {
    MS_ASSIGN_OR_RETURN(const bool quantized, infer::is_quantized_model(a.model));
    if (quantized) {
      MS_ASSIGN_OR_RETURN(weights, infer::describe_quantized_model(a.model));
      weights = "stored: " + weights;
    }
  }
  double kl = -1;
  if (!a.reference_model.empty() || !a.reference_checkpoint.empty()) {
    MS_ASSIGN_OR_RETURN(infer::EvalModel ref,
                        infer::load_for_evaluation(a.reference_model, a.reference_checkpoint, {}));
    MS_ASSIGN_OR_RETURN(kl, infer::mean_kl(*ref.loaded.model, *m.model, windows, a.batch,
                                           evaluated.forward));
  }
  if (a.json) {
    const nlohmann::ordered_json j = {{"model", a.model.empty() ? a.checkpoint : a.model},
                                      {"weights", weights},
                                      {"activations", activations},
                                      {"dataset", a.dataset},
                                      {"perplexity", r.perplexity},
                                      {"mean_nll", r.mean_nll},
                                      {"tokens", r.tokens},
                                      {"windows", r.windows},
                                      {"seq_len", len}};
    nlohmann::ordered_json out = j;
    if (kl >= 0) out["kl_to_reference"] = kl;
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("perplexity %.4f (mean NLL %.5f nats) over %lld tokens in %lld windows of %lld; "
                "weights %s, activations %s%s; %.1f s\n",
                r.perplexity, r.mean_nll, static_cast<long long>(r.tokens),
                static_cast<long long>(r.windows), static_cast<long long>(len), weights.c_str(),
                activations.c_str(), served ? " (serving kernels)" : "", clock.elapsed_s());
    if (kl >= 0) std::printf("KL(reference || model) %.4e nats per token\n", kl);
  }
  return 0;
}

void add_eval_ppl_command(cli::Tool& tool) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* sub = tool.add_subcommand(
      "eval-ppl", "Perplexity of a model over a dataset prefix or text file, per weight format",
      [a] { return run_eval(*a); });
  sub->add_option("--model", a->model,
                  "Hugging Face model directory, or a quantized one (ms-infer quantize)");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Training checkpoint (step dir, checkpoints dir or latest file)");
  sub->add_option("--dataset", a->dataset,
                  "Held-out tokens: a dataset prefix (ms-data build) or a text file")
      ->required();
  sub->add_option_function<std::string>(
         "--weights",
         [a](const std::string& name) { a->weights.format = *ops::parse_weight_format(name); },
         "Evaluate the linear weights as this format holds them: f32, bf16, int8 or int4")
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}))
      ->default_str("f32");
  sub->add_option("--group-size", a->weights.group_size, "Inputs per int4 scale: 32, 64 or 128")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  add_activations_flag(sub, a->weights);
  sub->add_option("--seq-len", a->seq_len,
                  "Tokens per window (0: 128 or the model's max_seq_len if shorter)")
      ->check(cli::kNonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--samples", a->samples, "Windows to evaluate, from the start (0: all)")
      ->check(cli::kNonNegativeNumber)
      ->capture_default_str();
  sub->add_option("--batch", a->batch, "Windows per forward")
      ->check(cli::kPositiveNumber)
      ->capture_default_str();
  sub->add_option("--reference-model", a->reference_model,
                  "Also report the mean KL divergence of this model's next-token distributions "
                  "from those of the reference (a model directory, f32 as loaded)");
  sub->add_option("--reference-checkpoint", a->reference_checkpoint,
                  "The same with a training checkpoint as the reference");
  sub->add_flag("--json", a->json, "Print one JSON object instead of the line");
}

}  // namespace

MS_CLI_COMMAND(eval_ppl, add_eval_ppl_command);

}  // namespace ms::infer_cmd
