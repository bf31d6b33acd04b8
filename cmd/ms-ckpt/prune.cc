// `ms-ckpt prune DIR --keep N`: removes all but the newest N complete checkpoints and (with
// --temporaries) what interrupted saves and reshards left (ckpt::is_temporary_name); the
// checkpoint `latest` names is never removed, and a step directory that is a symbolic link is
// reported and left alone (lib/ckpt/checkpoint.h).
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "ckpt/checkpoint.h"

namespace ms::ckpt_cmd {
namespace {

struct PruneArgs {
  std::string dir;
  int64_t keep = 1;
  bool temporaries = false;
};

Result<int> run_prune(const PruneArgs& args) {
  MS_ASSIGN_OR_RETURN(const ckpt::PruneReport report,
                      ckpt::prune_checkpoints(args.dir, args.keep, args.temporaries,
                                              io::default_env()));
  for (const std::string& name : report.removed) {
    std::printf("removed %s/%s\n", args.dir.c_str(), name.c_str());
  }
  for (const std::string& line : report.left_alone) std::printf("left alone: %s\n", line.c_str());
  std::printf("# pruned %zu director%s from %s, keeping the newest %lld\n", report.removed.size(),
              report.removed.size() == 1 ? "y" : "ies", args.dir.c_str(),
              static_cast<long long>(args.keep));
  return 0;
}

void add_prune_command(cli::Tool& tool) {
  auto args = std::make_shared<PruneArgs>();
  CLI::App* sub = tool.add_subcommand(
      "prune", "Remove all but the newest N complete checkpoints (never the latest)",
      [args] { return run_prune(*args); });
  sub->add_option("dir", args->dir, "A checkpoints/ directory")->required();
  sub->add_option("--keep", args->keep, "Complete checkpoints to keep")
      ->check(cli::kPositiveNumber)
      ->required();
  sub->add_flag("--temporaries", args->temporaries,
                "Also remove what crashed saves and reshards left (.tmp-step-*, .old-step-*, "
                "step-*.tmp.*, latest.tmp.*; only when none is running into DIR)");
}

}  // namespace

MS_CLI_COMMAND(prune, add_prune_command);

}  // namespace ms::ckpt_cmd
