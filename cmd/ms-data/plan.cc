// `ms-data plan --config mix.yaml --output data/mix.plan`: turns a mixture YAML into a plan file
// (docs/mixture.md) and prints what each source contributes. The resolved mixture is written
// beside the plan as <output>.yaml, so the plan can be rebuilt whatever --set made it.
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/timer.h"
#include "data/mixture.h"
#include "data/plan.h"
#include "data/plan_builder.h"
#include "io/atomic_file.h"
#include "io/output_path.h"

namespace ms::data_cmd {
namespace {

struct PlanArgs {
  std::string config_path;
  std::vector<std::string> sets;
  std::string output;
  bool json = false;
  bool replace = false;
};

void print_summary(const data::PlannedMixture& planned, const std::string& path, double seconds) {
  const data::PlanInfo& info = planned.info;
  std::printf("# ms-data plan: %lld train + %lld validation samples of %lld+1 tokens, seed %lld\n",
              static_cast<long long>(info.samples[0]), static_cast<long long>(info.samples[1]),
              static_cast<long long>(info.seq_len), static_cast<long long>(info.seed));
  std::printf("%-16s %7s %10s %12s %10s %7s %9s %10s %7s\n", "source", "weight", "train docs",
              "train tokens", "samples", "epochs", "val docs", "val samp", "val ep");
  for (const data::PlanSource& s : info.sources) {
    const data::PlanSplitCounts& t = s.splits[0];
    const data::PlanSplitCounts& v = s.splits[1];
    std::printf("%-16s %7.4f %10llu %12llu %10llu %7llu %9llu %10llu %7llu\n", s.name.c_str(),
                s.weight, static_cast<unsigned long long>(t.documents),
                static_cast<unsigned long long>(t.tokens), static_cast<unsigned long long>(t.samples),
                static_cast<unsigned long long>(t.epochs), static_cast<unsigned long long>(v.documents),
                static_cast<unsigned long long>(v.samples), static_cast<unsigned long long>(v.epochs));
  }
  std::printf("# wrote %s (%llu bytes, hash %s) in %.3f s\n", path.c_str(),
              static_cast<unsigned long long>(planned.file.bytes), planned.file.hash.c_str(),
              seconds);
}

nlohmann::ordered_json summary_json(const data::PlannedMixture& planned, const std::string& path,
                                    double seconds) {
  const data::PlanInfo& info = planned.info;
  nlohmann::ordered_json j;
  j["plan"] = path;
  j["hash"] = planned.file.hash;
  j["bytes"] = planned.file.bytes;
  j["seconds"] = seconds;
  j["seq_len"] = info.seq_len;
  j["samples"] = {{"train", info.samples[0]}, {"validation", info.samples[1]}};
  j["sources"] = nlohmann::ordered_json::array();
  for (const data::PlanSource& s : info.sources) {
    j["sources"].push_back({{"name", s.name}, {"weight", s.weight},
                            {"train_samples", s.splits[0].samples}, {"train_epochs", s.splits[0].epochs},
                            {"validation_samples", s.splits[1].samples}});
  }
  return j;
}

// The plan and its .yaml are written apart from the config and every source's files.
Status check_outputs(const PlanArgs& args, const data::MixtureConfig& config) {
  io::OutputRules rules{{args.config_path}, "--output", args.replace};
  for (const data::MixtureSource& s : config.sources) {
    for (const char* suffix : {".bin", ".idx", ".meta.json"}) {
      rules.inputs.push_back(s.prefix + suffix);
    }
  }
  for (const std::string& path : {args.output, args.output + ".yaml"}) {
    MS_RETURN_IF_ERROR(io::check_output_file(io::default_env(), path, rules));
  }
  return Status::OK();
}

Result<int> run_plan(const PlanArgs& args) {
  MS_ASSIGN_OR_RETURN(data::MixtureConfig config, data::load_mixture(args.config_path, args.sets));
  MS_RETURN_IF_ERROR(check_outputs(args, config));
  Stopwatch watch;
  MS_ASSIGN_OR_RETURN(data::PlannedMixture planned, data::plan_mixture(config, args.output));
  const double seconds = watch.elapsed_s();
  MS_RETURN_IF_ERROR(io::write_file_atomic(args.output + ".yaml", data::mixture_schema().dump(config, true)));
  if (args.json) {
    std::cout << summary_json(planned, args.output, seconds).dump(2) << std::endl;
  } else {
    print_summary(planned, args.output, seconds);
  }
  return 0;
}

void add_plan_command(cli::Tool& tool) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* sub = tool.add_subcommand(
      "plan", "Blend token datasets by a mixture YAML into a plan file for training",
      [args] { return run_plan(*args); });
  cli::add_config_options(sub, &args->config_path, &args->sets);
  sub->get_option("--config")->required();
  sub->add_option("--output,-o", args->output,
                  "Plan file to write (e.g. data/mix.plan), and <output>.yaml beside it; absent "
                  "unless --replace")->required();
  sub->add_flag("--replace", args->replace, "Replace an existing plan (atomically)");
  cli::add_json_flag(sub, &args->json);
  sub->footer("Mixture keys:\n" + data::mixture_schema().help());
}

}  // namespace

MS_CLI_COMMAND(plan, add_plan_command);

}  // namespace ms::data_cmd
