// `ms-data dump-plan <plan> --split train --samples 0:4`: packed samples of a plan exactly as the
// loader feeds them (seq_len + 1 tokens each), as decoded text or as token-id JSON lines, with
// the source and sample-in-source each came from. Text needs a tokenizer: --tokenizer or the
// one the plan's datasets were built with (its hash must match the plan's record).
#include "cmd/common/registry.h"

#include <charconv>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/plan.h"
#include "data/plan_samples.h"
#include "data/tokenizer.h"

namespace ms::data_cmd {
namespace {

struct DumpPlanArgs {
  std::string plan_path;
  std::string split = "train";
  std::string samples = "0:4";
  std::string format = "text";
  std::string tokenizer_path;
};

Result<int64_t> parse_index(std::string_view text, int64_t fallback) {
  if (text.empty()) return fallback;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    return InvalidArgument("--samples: '" + std::string(text) + "' is not a sample number");
  }
  return value;
}

// "A:B" (half-open), "A:", ":B" or "A", clipped to `samples`.
Result<std::pair<int64_t, int64_t>> parse_samples(const std::string& text, int64_t samples) {
  const size_t colon = text.find(':');
  std::pair<int64_t, int64_t> range;
  if (colon == std::string::npos) {
    MS_ASSIGN_OR_RETURN(range.first, parse_index(text, 0));
    range.second = range.first + 1;
  } else {
    MS_ASSIGN_OR_RETURN(range.first, parse_index(std::string_view(text).substr(0, colon), 0));
    MS_ASSIGN_OR_RETURN(range.second, parse_index(std::string_view(text).substr(colon + 1), samples));
  }
  range.second = std::min(range.second, samples);
  if (range.first >= range.second) {
    return InvalidArgument("--samples " + text + " selects no sample (the split has " +
                           std::to_string(samples) + ")");
  }
  return range;
}

Result<std::unique_ptr<data::Tokenizer>> plan_tokenizer(const data::Plan& plan, const std::string& given) {
  const data::PlanSource* recorded = nullptr;
  for (const data::PlanSource& s : plan.info().sources) {
    if (!s.tokenizer_path.empty()) recorded = &s;
  }
  if (given.empty() && recorded == nullptr) {
    return InvalidArgument("the plan's datasets name no tokenizer; pass --tokenizer or --format ids");
  }
  const std::string path = given.empty() ? recorded->tokenizer_path : given;
  MS_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tok, data::Tokenizer::load(path));
  if (recorded && !recorded->tokenizer_hash.empty() && recorded->tokenizer_hash != tok->content_hash()) {
    return InvalidArgument("tokenizer '" + path + "' is not the one source '" + recorded->name +
                           "' was built with (hash differs from the plan's record)");
  }
  return tok;
}

Result<int> run_dump_plan(const DumpPlanArgs& args) {
  MS_ASSIGN_OR_RETURN(data::Split split, data::parse_split(args.split));
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const data::Plan> plan, data::Plan::open(args.plan_path));
  MS_ASSIGN_OR_RETURN(auto range, parse_samples(args.samples, plan->samples(split)));
  std::unique_ptr<data::Tokenizer> tok;
  if (args.format == "text") {
    MS_ASSIGN_OR_RETURN(tok, plan_tokenizer(*plan, args.tokenizer_path));
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<data::PlanSampleReader> reader,
                      data::PlanSampleReader::open(plan, split));
  std::vector<int32_t> tokens(plan->info().seq_len + 1);
  for (int64_t g = range.first; g < range.second; ++g) {
    MS_RETURN_IF_ERROR(reader->read(g, tokens));
    const data::SampleRef ref = plan->sample(split, g);
    const std::string& source = plan->info().sources[ref.source].name;
    if (!tok) {
      nlohmann::ordered_json line{{"sample", g}, {"source", source}, {"source_sample", ref.index},
                                  {"ids", tokens}};
      std::cout << line.dump() << "\n";
      continue;
    }
    MS_ASSIGN_OR_RETURN(std::string text, tok->decode(tokens));
    std::cout << "=== " << args.split << " sample " << g << " (source " << source << ", sample "
              << ref.index << ", " << tokens.size() << " tokens) ===\n" << text << "\n";
  }
  std::cout.flush();
  return 0;
}

void add_dump_plan_command(cli::Tool& tool) {
  auto args = std::make_shared<DumpPlanArgs>();
  CLI::App* sub = tool.add_subcommand(
      "dump-plan", "Print packed samples of a plan as text or as token-id JSON lines",
      [args] { return run_dump_plan(*args); });
  sub->add_option("plan", args->plan_path, "Plan file written by 'ms-data plan'")->required();
  sub->add_option("--split", args->split, "train or validation")
      ->check(CLI::IsMember({"train", "validation"}))->capture_default_str();
  sub->add_option("--samples", args->samples, "Global samples A:B (half-open), A:, :B or A")
      ->capture_default_str();
  sub->add_option("--format", args->format, "text (decoded) or ids (JSON lines)")
      ->check(CLI::IsMember({"text", "ids"}))->capture_default_str();
  sub->add_option("--tokenizer,-t", args->tokenizer_path,
                  "Tokenizer for --format text (default: the one the plan's datasets name)");
}

}  // namespace

MS_CLI_COMMAND(dump_plan, add_dump_plan_command);

}  // namespace ms::data_cmd
