// `ms-ckpt grow <ckpt> --to d_model=N,n_layers=L,... [--insert every-K|l1,l2] --output DIR`:
// a trained checkpoint expanded into a wider and deeper model computing the same function
// (LEMON-style lossless expansion, lib/ckpt/grow.h), written by the training save path in an MPI
// singleton so ms-train resumes from it and ms-ckpt export and ms-infer read it.
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "ckpt/grow.h"
#include "ckpt/manifest.h"
#include "comm/mpi_communicator.h"
#include "config/value_codec.h"

namespace ms::ckpt_cmd {
namespace {

struct GrowArgs {
  std::string checkpoint;
  std::string to;
  std::string insert;
  std::string output;
  std::optional<uint64_t> seed;
  bool replace = false;
  bool restart_schedule = false;
};

// The --set overrides a training run needs to resume from the grown checkpoint.
std::string resume_overrides(const config::ModelConfig& to) {
  return "--set model.d_model=" + std::to_string(to.d_model) +
         " --set model.n_layers=" + std::to_string(to.n_layers) +
         " --set model.d_ff=" + std::to_string(to.d_ff) +
         " --set model.n_heads=" + std::to_string(to.n_heads) +
         " --set model.n_kv_heads=" + std::to_string(to.n_kv_heads) +
         (to.moe.shared_expert_d_ff > 0
              ? " --set model.moe.shared_expert_d_ff=" + std::to_string(to.moe.shared_expert_d_ff)
              : std::string()) +
         " --set model.norm_eps=" + config::format_double(to.norm_eps);
}

Result<int> run_grow(const GrowArgs& args) {
  MS_ASSIGN_OR_RETURN(ckpt::GrowTarget target, ckpt::parse_grow_target(args.to));
  MS_ASSIGN_OR_RETURN(ckpt::GrowInsert insert, ckpt::parse_grow_insert(args.insert));
  return cli::run_in_world([&](comm::MpiCommunicator& world) -> Result<int> {
    MS_ASSIGN_OR_RETURN(std::string step_dir, ckpt::resolve_checkpoint(args.checkpoint));
    ckpt::GrowOptions options;
    options.output_dir = args.output;
    options.replace = args.replace;
    options.target = target;
    options.insert = insert;
    options.seed = args.seed;
    options.restart_schedule = args.restart_schedule;
    MS_ASSIGN_OR_RETURN(ckpt::GrowReport report,
                        ckpt::grow_checkpoint(step_dir, options, world, io::default_env()));
    std::printf("grew %s (%s) to %s as %s: %zu parameters, %s\n", step_dir.c_str(),
                ckpt::grow_target_string(report.plan.from).c_str(),
                ckpt::grow_target_string(report.plan.to).c_str(), report.step_dir.c_str(),
                report.parameters,
                report.optimizer_state ? "optimizer state reset (zero moments, update count 0)"
                                       : "no optimizer state (the source had none)");
    std::printf("resume training with: %s\n", resume_overrides(report.plan.to).c_str());
    return 0;
  });
}

void add_grow_command(cli::Tool& tool) {
  auto args = std::make_shared<GrowArgs>();
  CLI::App* sub = tool.add_subcommand(
      "grow",
      "Expand a checkpoint into a wider and deeper model computing the same function "
      "(lossless, LEMON-style); optimizer state reset",
      [args] { return run_grow(*args); });
  sub->add_option("checkpoint", args->checkpoint,
                  "Step directory, checkpoints/ directory or latest file")->required();
  sub->add_option("--to", args->to,
                  "Grown sizes as key=value items, any subset of d_model, n_layers, d_ff, "
                  "n_heads, n_kv_heads, shared_expert_d_ff, e.g. d_model=96,n_layers=6; the "
                  "head size d_model/n_heads stays, n_kv_heads keeps the query group size "
                  "unless named")->required();
  sub->add_option("--insert", args->insert,
                  "Where new layers go: every-K (after every K-th original layer) or original "
                  "layer indices (0-based) to insert after, e.g. 1,3; default: spread evenly");
  sub->add_option("--output,-o", args->output,
                  "checkpoints/ directory to write step-XXXXXXXX and latest into, outside the "
                  "source checkpoint")->required();
  sub->add_option("--seed", args->seed,
                  "Seed of the fresh values in the new input columns (default: the run's "
                  "run.seed)");
  sub->add_flag("--restart-schedule", args->restart_schedule,
                "Write the grown checkpoint as step 0, so the resumed run's learning-rate "
                "schedule (warmup included) starts afresh; the data position is kept");
  sub->add_flag("--replace", args->replace,
                "Replace an existing step directory of that step in --output (removed once the "
                "new one is committed)");
}

}  // namespace

MS_CLI_COMMAND(grow, add_grow_command);

}  // namespace ms::ckpt_cmd
