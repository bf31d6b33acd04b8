// `ms-infer quantize`: writes a quantized model directory (docs/formats/quantized-model.md)
// from a Hugging Face directory or a training checkpoint, which `generate` and `bench` serve
// with --model. Either every linear weight in one format (--weights, --group-size), or, with
// --memory-budget and --calibration, a format per weight chosen after LLM-PQ: each weight's
// sensitivity to each format is measured on calibration text, and the least-error assignment
// within the budget is found by dynamic programming (infer/bit_allocation.h). The table of the
// assignment is printed beside each uniform format. The work is in lib/infer; this file parses
// options and prints.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cmd/common/registry.h"
#include "core/timer.h"
#include "infer/bit_allocation.h"
#include "infer/model_loader.h"
#include "infer/quant_sensitivity.h"
#include "infer/quantized_model.h"
#include "infer/token_windows.h"
#include "io/output_path.h"

namespace ms::infer_cmd {
namespace {

struct QuantizeArgs {
  std::string model, checkpoint, output;
  infer::WeightOptions weights{ops::WeightFormat::kInt8, ops::kDefaultInt4GroupSize};
  std::string budget, calibration;
  int64_t calibration_samples = 8, calibration_len = 0;
  bool weights_given = false;
  bool replace = false;
};

// The tokenizer.json beside the weights: the directory's, or the checkpoint step's copy.
Result<std::string> tokenizer_path(const QuantizeArgs& a) {
  if (!a.model.empty()) return a.model + "/tokenizer.json";
  MS_ASSIGN_OR_RETURN(const std::string step_dir, ckpt::resolve_checkpoint(a.checkpoint));
  return step_dir + "/tokenizer.json";
}

// Bytes of the weights no assignment changes (embedding, norms, routers; f32).
int64_t fixed_bytes(const model::Transformer& m) {
  const std::vector<size_t> linear = m.cached_linear_parameters();
  int64_t bytes = 0;
  for (size_t i = 0; i < m.parameters().size(); ++i) {
    if (std::find(linear.begin(), linear.end(), i) == linear.end()) {
      bytes += static_cast<int64_t>(m.parameters()[i].value.nbytes());
    }
  }
  return bytes;
}

infer::FormatAssignment assignment_of(const std::vector<infer::AllocationItem>& items,
                                      const infer::Allocation& a) {
  infer::FormatAssignment formats;
  for (size_t k = 0; k < items.size(); ++k) {
    formats[items[k].name] = items[k].choices[a.choice[k]].format;
  }
  return formats;
}

void print_table(const std::vector<infer::AllocationItem>& items, const infer::Allocation& a) {
  std::printf("# %-48s %-9s %12s %12s\n", "tensor", "format", "bytes", "KL");
  for (size_t k = 0; k < items.size(); ++k) {
    const infer::AllocationChoice& c = items[k].choices[a.choice[k]];
    std::printf("  %-48s %-9s %12lld %12.4e\n", items[k].name.c_str(),
                infer::format_label(c.format).c_str(), static_cast<long long>(c.bytes), c.error);
  }
}

// One summary row: the assignment's weight bytes (all weights), the sum of its per-weight KLs
// and the KL measured with all of it applied at once.
Status print_summary_row(const std::string& name, const Result<infer::Allocation>& a,
                         const std::vector<infer::AllocationItem>& items, int64_t fixed,
                         const infer::KlReference& ref, model::Transformer& m) {
  if (!a.ok()) {
    std::printf("  %-22s %s\n", name.c_str(), a.status().message().c_str());
    return Status::OK();
  }
  MS_ASSIGN_OR_RETURN(const double measured, ref.kl(m, assignment_of(items, *a)));
  std::printf("  %-22s %16s %16lld %12.4e %12.4e\n", name.c_str(),
              infer::format_bytes(fixed + a->bytes).c_str(),
              static_cast<long long>(fixed + a->bytes), a->error, measured);
  return Status::OK();
}

Result<infer::FormatAssignment> allocate_under_budget(const QuantizeArgs& a, infer::LoadedModel& m) {
  MS_ASSIGN_OR_RETURN(const int64_t budget, infer::parse_byte_size(a.budget));
  model::Transformer& model = *m.model;
  const int64_t len = a.calibration_len > 0 ? a.calibration_len
                                            : std::min<int64_t>(128, model.config().max_seq_len);
  MS_ASSIGN_OR_RETURN(const infer::TokenWindows windows,
                      infer::read_token_windows(a.calibration, *m.tokenizer, len,
                                                a.calibration_samples, model.config().vocab_size,
                                                "--calibration-len"));
  const int64_t fixed = fixed_bytes(model);
  // Refused before the measurements: the smallest sizes do not depend on them.
  std::vector<infer::AllocationItem> sizes;
  for (size_t i : model.cached_linear_parameters()) {
    const model::Parameter& p = model.parameters()[i];
    sizes.push_back({p.name, infer::candidate_formats(p.global_shape[0], p.global_shape[1])});
  }
  const int64_t minimum = fixed + infer::minimum_bytes(sizes);
  if (budget < minimum) {
    return InvalidArgument("--memory-budget " + a.budget + " (" + std::to_string(budget) +
                           " bytes) is below the smallest assignment, " +
                           infer::format_bytes(minimum) + " (" + std::to_string(minimum) +
                           " bytes: every linear weight in its smallest format and " +
                           std::to_string(fixed) + " bytes of other weights in f32)");
  }
  MS_ASSIGN_OR_RETURN(const infer::KlReference ref, infer::KlReference::create(model, windows));
  std::fprintf(stderr, "quantize: measuring sensitivities on %lld windows of %lld tokens\n",
               static_cast<long long>(windows.count()), static_cast<long long>(len));
  const Stopwatch clock;
  MS_ASSIGN_OR_RETURN(
      const std::vector<infer::AllocationItem> items,
      infer::measure_sensitivity(model, ref, [](size_t done, size_t total) {
        std::fprintf(stderr, "\rquantize: %zu/%zu weights measured", done, total);
        if (done == total) std::fprintf(stderr, "\n");
      }));
  size_t measured = 0;
  for (const infer::AllocationItem& item : items) measured += item.choices.size() - 1;
  std::fprintf(stderr, "quantize: %zu measurements (weight x format) in %.1f s\n", measured,
               clock.elapsed_s());
  MS_ASSIGN_OR_RETURN(const infer::Allocation alloc, infer::allocate_bits(items, budget - fixed));
  print_table(items, alloc);
  std::printf("# %-22s %16s %16s %12s %12s\n", "assignment", "weights", "bytes", "sum of KL",
              "measured KL");
  MS_RETURN_IF_ERROR(print_summary_row("budget " + a.budget, alloc, items, fixed, ref, model));
  const infer::WeightOptions uniform[] = {{ops::WeightFormat::kBF16, 0},
                                          {ops::WeightFormat::kInt8, 0},
                                          {ops::WeightFormat::kInt4, 128},
                                          {ops::WeightFormat::kInt4, 64},
                                          {ops::WeightFormat::kInt4, 32}};
  for (const infer::WeightOptions& f : uniform) {
    MS_RETURN_IF_ERROR(print_summary_row("uniform " + infer::format_label(f),
                                         infer::uniform_allocation(items, f), items, fixed, ref,
                                         model));
  }
  std::printf("# the dynamic programme counted in units of %lld bytes (%s)\n",
              static_cast<long long>(alloc.unit), alloc.exact ? "exact" : "sizes rounded up");
  return assignment_of(items, alloc);
}

// What quantize reads, so the output can be kept apart from all of it.
Result<io::OutputRules> output_rules(const QuantizeArgs& a) {
  io::OutputRules rules;
  rules.flag = "--output";
  rules.replace = a.replace;
  if (!a.model.empty()) rules.inputs.push_back(a.model);
  if (!a.checkpoint.empty()) {
    rules.inputs.push_back(a.checkpoint);
    MS_ASSIGN_OR_RETURN(const std::string step_dir, ckpt::resolve_checkpoint(a.checkpoint));
    rules.inputs.push_back(step_dir);
  }
  if (!a.calibration.empty()) {
    for (const char* suffix : {"", ".bin", ".idx", ".meta.json"}) {
      rules.inputs.push_back(a.calibration + suffix);
    }
  }
  return rules;
}

Result<int> run_quantize(const QuantizeArgs& a) {
  if (a.output.empty()) return InvalidArgument("--output is required");
  if (!a.budget.empty() && a.weights_given) {
    return InvalidArgument("give --weights (one format for every linear weight) or "
                           "--memory-budget (a format per weight), not both");
  }
  if (!a.budget.empty() && a.calibration.empty()) {
    return InvalidArgument("--memory-budget needs --calibration (a dataset prefix or a text "
                           "file) to measure each weight's sensitivity on");
  }
  MS_RETURN_IF_ERROR(infer::check_weight_options(a.weights));
  if (!a.model.empty()) {
    MS_ASSIGN_OR_RETURN(const bool quantized, infer::is_quantized_model(a.model));
    if (quantized) {
      return InvalidArgument(a.model + " is already quantized; quantize the original model");
    }
  }
  MS_ASSIGN_OR_RETURN(const io::OutputRules rules, output_rules(a));
  MS_ASSIGN_OR_RETURN(std::unique_ptr<io::StagedDirectory> out,
                      io::StagedDirectory::create(io::default_env(), a.output, rules));
  MS_ASSIGN_OR_RETURN(infer::LoadedModel m, infer::load_model(a.model, a.checkpoint));
  MS_ASSIGN_OR_RETURN(const std::string tokenizer, tokenizer_path(a));
  infer::FormatAssignment formats;
  if (a.budget.empty()) {
    formats = infer::uniform_assignment(*m.model, a.weights);
  } else {
    MS_ASSIGN_OR_RETURN(formats, allocate_under_budget(a, m));
  }
  MS_RETURN_IF_ERROR(infer::save_quantized_model(*m.model, formats, tokenizer, out->path()));
  // Read back before it is published, so a directory that does not load never appears.
  MS_ASSIGN_OR_RETURN(infer::LoadedModel written, infer::load_hf_model(out->path()));
  MS_RETURN_IF_ERROR(out->commit());
  std::fprintf(stderr, "quantize: wrote %s: %lld linear weights quantized, %s of them (%s as f32)\n",
               out->final_path().c_str(), static_cast<long long>(written.serving_weights.matrices),
               infer::format_bytes(written.serving_weights.quantized_bytes).c_str(),
               infer::format_bytes(written.serving_weights.f32_bytes).c_str());
  return 0;
}

void add_quantize_command(cli::Tool& tool) {
  auto a = std::make_shared<QuantizeArgs>();
  CLI::App* sub = tool.add_subcommand(
      "quantize",
      "Write a model directory with quantized linear weights, in one format or a format per "
      "weight chosen under a memory budget",
      [a] { return run_quantize(*a); });
  sub->add_option("--model", a->model, "Hugging Face model directory to quantize");
  sub->add_option("--checkpoint", a->checkpoint,
                  "Training checkpoint to quantize (step dir, checkpoints dir or latest file)");
  sub->add_option("--output,-o", a->output,
                  "The quantized model directory to write: absent or empty (see --replace), and "
                  "outside every input; built under a temporary name and renamed into place")
      ->required();
  sub->add_flag("--replace", a->replace,
                "Replace an existing --output directory (removed once the new one is complete)");
  sub->add_option_function<std::string>(
         "--weights",
         [a](const std::string& name) {
           a->weights.format = *ops::parse_weight_format(name);
           a->weights_given = true;
         },
         "Format of every linear weight: bf16, int8 (a scale per output channel) or int4 (a "
         "scale per --group-size inputs)")
      ->check(CLI::IsMember({"f32", "bf16", "int8", "int4"}))
      ->default_str("int8");
  sub->add_option("--group-size", a->weights.group_size,
                  "Inputs per int4 scale with --weights int4: 32, 64 or 128")
      ->check(CLI::IsMember({32, 64, 128}))
      ->capture_default_str();
  sub->add_option("--memory-budget", a->budget,
                  "Choose a format per linear weight so that all weights fit this many bytes "
                  "(2GB, 512MB, 1.5GiB, or bytes) with the least calibration error");
  sub->add_option("--calibration", a->calibration,
                  "Calibration text for --memory-budget: a dataset prefix (ms-data build) or a "
                  "text file");
  sub->add_option("--calibration-samples", a->calibration_samples,
                  "Calibration windows (the first N of --calibration)")
      ->check(cli::kPositiveNumber)
      ->capture_default_str();
  sub->add_option("--calibration-len", a->calibration_len,
                  "Tokens per calibration window (0: 128 or the model's max_seq_len if shorter)")
      ->check(cli::kNonNegativeNumber)
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(quantize, add_quantize_command);

}  // namespace ms::infer_cmd
