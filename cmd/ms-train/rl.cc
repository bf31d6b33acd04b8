// ms-train rl: RL post-training of an ms-train checkpoint with verifiable rewards (GRPO, DAPO,
// PPO, VAPO), rollouts from ms-infer's engine on the actor's own weights (lib/rl, docs/rl.md).
//   ms-train rl --config rl.yaml
#include <iostream>
#include <memory>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "core/logging.h"
#include "rl/rl_config.h"
#include "rl/rl_run.h"

namespace {

struct RlOptions {
  std::string config_path;
};

ms::Result<int> rl(const RlOptions& opts) {
  if (opts.config_path.empty()) {
    return ms::InvalidArgument("no RL config given: pass --config <rl.yaml> (docs/rl.md)");
  }
  MS_ASSIGN_OR_RETURN(const ms::rl::RlConfig config, ms::rl::load_rl_config(opts.config_path));
  return ms::cli::run_in_world([&](ms::comm::MpiCommunicator& world) -> ms::Result<int> {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<ms::rl::RlRun> run,
                        ms::rl::RlRun::create(config, world, [](const std::string& line) {
                          MS_LOG(Info) << line;
                        }));
    MS_ASSIGN_OR_RETURN(const ms::rl::StepMetrics last, run->run());
    // Rank 0 trains under every placement, so its last step holds the run's figures (a
    // rollout-only rank's hold only its generation).
    if (world.rank() != 0) return 0;
    std::cout << "rl: done, " << last.step << " steps";
    if (last.rounds > 0) std::cout << "; last " << ms::rl::step_metrics_json(last);
    std::cout << "\n";
    return 0;
  });
}

void add_rl(ms::cli::Tool& tool) {
  auto opts = std::make_shared<RlOptions>();
  CLI::App* cmd = tool.add_subcommand(
      "rl",
      "RL post-training with verifiable rewards (GRPO, DAPO, PPO, VAPO): sample G responses per "
      "prompt with the inference engine on the actor's own weights, score them, and update the "
      "actor on clipped advantages; one process, or data- and tensor-parallel ranks under "
      "mpirun, colocated or with generation-only ranks (docs/rl.md)",
      [opts] { return rl(*opts); });
  cmd->add_option("--config", opts->config_path, "The RL config (rl.yaml; keys in docs/rl.md)")
      ->required();
}

}  // namespace

MS_CLI_COMMAND(rl, add_rl);
