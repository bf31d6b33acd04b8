// `ms-infer quantize`: writes a quantized model directory (docs/formats/quantized-model.md)
// from a Hugging Face directory or a training checkpoint, which `generate` and `bench` serve
// with --model. Either every linear weight in one format (--weights, --group-size), or, with
// --memory-budget and --calibration, a format per weight chosen after LLM-PQ: each weight's
// sensitivity to each format is measured on calibration text, and the least-error assignment
// within the budget is found by dynamic programming (infer/bit_allocation.h). The table of the
// assignment is printed beside each uniform format. The work is in lib/infer
// (infer/budget_allocation.h); this file parses options and prints.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "cmd/common/registry.h"
#include "core/timer.h"
#include "infer/bit_allocation.h"
#include "infer/budget_allocation.h"
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
void print_summary_row(const infer::AssignmentComparison& row, int64_t fixed) {
  if (!row.allocation.ok()) {
    std::printf("  %-22s %s\n", row.name.c_str(), row.allocation.status().message().c_str());
    return;
  }
  const infer::Allocation& a = *row.allocation;
  std::printf("  %-22s %16s %16lld %12.4e %12.4e\n", row.name.c_str(),
              infer::format_bytes(fixed + a.bytes).c_str(),
              static_cast<long long>(fixed + a.bytes), a.error, row.measured_kl);
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
  // Refused before the measurements: the smallest sizes do not depend on them.
  MS_RETURN_IF_ERROR(infer::check_budget_fits(model, budget, "--memory-budget " + a.budget));
  const int64_t fixed = infer::fixed_weight_bytes(model);
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
  MS_ASSIGN_OR_RETURN(const std::vector<infer::AssignmentComparison> rows,
                      infer::compare_assignments(model, ref, items, alloc, "budget " + a.budget));
  print_table(items, alloc);
  std::printf("# %-22s %16s %16s %12s %12s\n", "assignment", "weights", "bytes", "sum of KL",
              "measured KL");
  for (const infer::AssignmentComparison& row : rows) print_summary_row(row, fixed);
  std::printf("# the dynamic programme counted in units of %lld bytes (%s)\n",
              static_cast<long long>(alloc.unit), alloc.exact ? "exact" : "sizes rounded up");
  return infer::assignment_of(items, alloc);
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
