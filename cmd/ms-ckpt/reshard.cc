// `ms-ckpt reshard <ckpt> --to tp=2,dp=2,zero=1 --output DIR` (or pp=2,vpp=2,dp=2, ep=4,dp=4):
// rewrites a checkpoint's shards as the target layout saves them, streaming one bounded box at a
// time; under mpirun the output files are divided among the processes
// (lib/ckpt/reshard_offline.h). The tensor-parallel slices, the pipeline ranks and the expert
// owners follow the trainer's rules by tensor name, parallel::tp_shard,
// parallel::pp_ranks_holding and parallel::ep_rank_holding, passed in from here because
// lib/ckpt does not depend on lib/parallel.
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "ckpt/reshard_offline.h"
#include "comm/agree.h"
#include "comm/mpi_communicator.h"
#include "data/progress.h"
#include "parallel/ep_placement.h"
#include "parallel/pp_placement.h"
#include "parallel/tp_shards.h"

namespace ms::ckpt_cmd {
namespace {

struct ReshardArgs {
  std::string checkpoint;
  std::string to;
  std::string output;
  uint64_t max_shard_bytes = 64ull << 20;
  bool replace = false;
};

Result<int> reshard_in_world(const ReshardArgs& args, const ckpt::ReshardTarget& target,
                             comm::Communicator& world) {
  Result<std::string> resolved = ckpt::resolve_checkpoint(args.checkpoint);
  MS_RETURN_IF_ERROR(comm::agree(world, resolved.status(), "finding the checkpoint"));
  const std::string step_dir = *resolved;
  ckpt::ReshardOptions options;
  options.output_dir = args.output;
  options.replace = args.replace;
  options.target = target;
  options.tp_placement = parallel::tp_shard;
  options.pp_placement = parallel::pp_ranks_holding;
  options.ep_placement = parallel::ep_rank_holding;
  options.max_shard_bytes = args.max_shard_bytes;
  data::Progress progress("reshard " + step_dir, 0);
  options.progress = [&](uint64_t done, uint64_t) { progress.update(done); };
  MS_ASSIGN_OR_RETURN(std::string out,
                      ckpt::reshard_checkpoint(step_dir, options, world, io::default_env()));
  progress.finish();
  if (world.rank() == 0) {
    std::printf("resharded %s to %s as %s (%d writer process(es))\n", step_dir.c_str(),
                ckpt::reshard_target_string(target).c_str(), out.c_str(), world.size());
  }
  return 0;
}

Result<int> run_reshard(const ReshardArgs& args) {
  MS_ASSIGN_OR_RETURN(ckpt::ReshardTarget target, ckpt::parse_reshard_target(args.to));
  return cli::run_in_world(
      [&](comm::MpiCommunicator& world) { return reshard_in_world(args, target, world); });
}

void add_reshard_command(cli::Tool& tool) {
  auto args = std::make_shared<ReshardArgs>();
  CLI::App* sub = tool.add_subcommand(
      "reshard",
      "Rewrite a checkpoint's shards for another layout (tp, dp, zero, pp, vpp, pp_layers, ep); "
      "parallel under mpirun",
      [args] { return run_reshard(*args); });
  sub->add_option("checkpoint", args->checkpoint,
                  "Step directory, checkpoints/ directory or latest file")->required();
  sub->add_option("--to", args->to,
                  "Target layout as key=value items: tp, dp, pp, vpp, ep (default 1; ep divides "
                  "dp), zero (0 or 1, default 0), pp_layers (layers per virtual stage joined by "
                  "'+', e.g. 4+2; default an even cut), e.g. tp=2,dp=2,zero=1, pp=2,vpp=2,dp=2 "
                  "or ep=4,dp=4; tp slices, pipeline stages and expert owners (dp rank d holds "
                  "the experts of ep rank d % ep) follow the trainer's rules by tensor name "
                  "(docs/parallel.md)")->required();
  sub->add_option("--output,-o", args->output,
                  "checkpoints/ directory to write step-XXXXXXXX and latest into, outside the "
                  "source checkpoint")->required();
  sub->add_flag("--replace", args->replace,
                "Replace an existing step directory of that step in --output (removed once the "
                "new one is committed)");
  sub->add_option("--max-shard-bytes", args->max_shard_bytes, "Largest box written as one shard")
      ->check(cli::kPositiveNumber)
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(reshard, add_reshard_command);

}  // namespace ms::ckpt_cmd
