// `ms-diagnose moe-load <run or telemetry dir>`: how evenly a MoE run's router spread tokens
// over the experts of each layer, and what a capacity limit dropped (lib/diag/moe_load.h). The
// counts in the step records are global, so only rank 0's file (the lowest rank's, when rank 0's
// is missing) is read. Exit 0 with a report; 1 when the records hold no expert counts.
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>

#include "diag/moe_load.h"
#include "io/env.h"
#include "telemetry/reader.h"

namespace ms::diagnose_cmd {
namespace {

struct MoeLoadArgs {
  std::string dir;
  double balanced_below = diag::kBalancedMoeImbalance;
  bool json = false;
};

// Rank 0's telemetry, or the lowest rank's when a directory lacks rank 0's file.
Result<telemetry::RankTelemetry> read_one_rank(const std::string& dir) {
  io::Env& env = io::default_env();
  const std::string rank0 = telemetry::rank_file_path(dir, 0);
  if (env.is_directory(dir) && env.exists(rank0)) return telemetry::read_telemetry_file(rank0);
  MS_ASSIGN_OR_RETURN(std::vector<telemetry::RankTelemetry> ranks,
                      telemetry::read_telemetry_dir(dir));
  return std::move(ranks.front());
}

Result<int> run_moe_load(const MoeLoadArgs& args) {
  const std::string inner = args.dir + "/telemetry";
  const std::string dir = io::default_env().is_directory(inner) ? inner : args.dir;
  MS_ASSIGN_OR_RETURN(telemetry::RankTelemetry rank, read_one_rank(dir));
  MS_ASSIGN_OR_RETURN(diag::MoeLoadReport report,
                      diag::summarize_moe_load(rank, args.balanced_below));
  if (args.json) {
    std::cout << diag::moe_load_json(report).dump(2) << std::endl;
  } else {
    std::fputs(diag::moe_load_text(report).c_str(), stdout);
  }
  return 0;
}

void add_moe_load_command(cli::Tool& tool) {
  auto a = std::make_shared<MoeLoadArgs>();
  CLI::App* sub = tool.add_subcommand(
      "moe-load", "Per-expert token shares, load imbalance and dropped tokens of a MoE run",
      [a] { return run_moe_load(*a); });
  sub->add_option("dir", a->dir, "Telemetry directory (or a run directory holding telemetry/)")
      ->required();
  sub->add_option("--balanced-below", a->balanced_below,
                  "A layer is balanced when max expert load / mean expert load is below this")
      ->capture_default_str();
  cli::add_json_flag(sub, &a->json);
}

}  // namespace

MS_CLI_COMMAND(moe_load, add_moe_load_command);

}  // namespace ms::diagnose_cmd
