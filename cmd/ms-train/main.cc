// ms-train: trains with no subcommand, as one process or under `mpirun -np N` (N = pp x dp x
// cp x tp model ranks + parallel.loaders); `ms-train plan` (plan.cc) chooses a layout.
// --dry-run resolves and validates a config without starting MPI and prints it with its
// parallel layout (--ranks N plans for N ranks);
// --config-help prints the config reference. The loop itself is ms::train::Trainer.
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string_view>

#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"
#include "cmd/common/tool.h"
#include "comm/mpi_communicator.h"
#include "config/run_config.h"
#include "core/logging.h"
#include "ops/backend_registry.h"
#include "plan/layout.h"
#include "plan/memory.h"
#include "train/layer_shape.h"
#include "train/layout_report.h"
#include "train/stop_signal.h"
#include "train/trainer.h"

#if MS_HAVE_CUDA
#include "kernels/cuda_backend.h"
#endif

namespace {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> sets;
  bool dry_run = false;
  int ranks = 0;  // --ranks: the world size --dry-run plans for; 0: the launcher's, or tp
  bool config_help = false;
};

// The number of processes the launcher started (mpirun, srun) and the variable that says so;
// 1 and no variable when run alone.
struct LauncherSize {
  int ranks = 1;
  const char* variable = nullptr;
};

// InvalidArgument naming the variable when its value is not a whole number from 1 to 2^24.
ms::Result<LauncherSize> launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    const char* value = std::getenv(name);
    if (value == nullptr) continue;
    const std::string_view text(value);
    int ranks = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), ranks);
    if (error != std::errc() || end != text.data() + text.size() || ranks < 1 ||
        ranks > (1 << 24)) {
      return ms::InvalidArgument(std::string(name) + "='" + std::string(text) +
                                 "' is not a number of ranks (a whole number from 1 to 16777216; "
                                 "ms-train reads the launcher's world size from it)");
    }
    return LauncherSize{ranks, name};
  }
  return LauncherSize{};
}

// A config error, found identically on every rank before MPI starts. Alone, it is returned
// (and printed by the tool); under a launcher with several ranks it is the outcome of every
// rank's job, which cli::run_in_world prints once.
ms::Result<int> report_config_error(const ms::Status& status) {
  const ms::Result<LauncherSize> launcher = launcher_size();
  if (!launcher.ok() || launcher->ranks <= 1) return status;
  return ms::cli::run_in_world([&](ms::comm::MpiCommunicator&) -> ms::Result<int> { return status; });
}

// Every failure of Trainer reaches the job's end agreement in run_in_world, which prints it
// and makes every rank exit 1 (or aborts the job when a rank failed alone mid-step).
ms::Result<int> run_training(ms::config::RunConfig config, ms::comm::Communicator& world) {
  MS_ASSIGN_OR_RETURN(std::unique_ptr<ms::train::Trainer> trainer,
                      ms::train::Trainer::create(std::move(config), world));
  MS_ASSIGN_OR_RETURN(const ms::train::TrainSummary summary, trainer->run());
  MS_LOG(Info) << "done: " << summary.steps_done << " steps"
               << (summary.stopped_by_signal ? " (stopped by a signal)" : "") << "; run dir "
               << trainer->config().run.dir;
  return 0;
}

// The world size --dry-run plans for: --ranks, else the launcher's, else tp + loaders ranks.
ms::Result<int> dry_run_ranks(const TrainOptions& opts, const ms::config::RunConfig& config) {
  if (opts.ranks > 0) return opts.ranks;
  MS_ASSIGN_OR_RETURN(const LauncherSize launcher, launcher_size());
  if (launcher.ranks > 1) return launcher.ranks;
  return static_cast<int>(config.parallel.tp + config.parallel.loaders);
}

// The device line --dry-run prints: where a rank trains, in what precision, and the planner's
// memory for the busiest pipeline rank (plan/memory.h): what the device's arena must hold.
ms::Result<std::string> dry_run_device(const ms::config::RunConfig& config, int ranks) {
  MS_ASSIGN_OR_RETURN(const ms::plan::Layout layout, ms::plan::layout_of(config, ranks));
  MS_ASSIGN_OR_RETURN(const std::vector<ms::plan::RankElements> elements,
                      ms::plan::rank_elements(config, layout));
  // The trainer keeps f32 weights and activations in either precision (docs/train.md), so the
  // model's state is sized at 4 bytes an element; bf16 adds the backend's operand copies.
  MS_ASSIGN_OR_RETURN(std::vector<ms::plan::RankMemory> memory,
                      ms::plan::rank_memory(config, layout, elements, 4, 0.0));
  const bool on_device = config.train.device != "cpu";
  const ms::config::RunConfig applied = ms::plan::apply_layout(config, layout);
  for (ms::plan::RankMemory& rank : memory) {
    rank.scratch_mib =
        ms::train::bf16_scratch_bytes(applied, on_device, rank.pp_rank == layout.pp - 1) /
        (1024.0 * 1024.0);
  }
  const ms::plan::RankMemory& peak = ms::plan::peak_rank(memory);
  const bool bf16 = config.train.precision == ms::config::Precision::kBf16;
  char scratch[96] = "";
  if (bf16) {
    std::snprintf(scratch, sizeof(scratch), ", bf16 operand copies %s%.1f",
                  on_device ? "up to " : "", peak.scratch_mib);
  }
  char line[400];
  std::snprintf(line, sizeof(line),
                "# device: %s, precision %s; expected peak memory per model rank %.1f MiB "
                "(weights %.1f, gradients %.1f, optimizer state %.1f, activations %.1f%s)\n",
                config.train.device.c_str(), bf16 ? "bf16" : "f32", peak.total_mib(),
                peak.weights_mib, peak.gradients_mib, peak.optimizer_mib, peak.activations_mib,
                scratch);
  return std::string(line);
}

// The layout --dry-run prints for `ranks`; under a launcher a refusal says which variable set
// the count.
ms::Result<std::string> dry_run_layout(const TrainOptions& opts,
                                       const ms::config::RunConfig& config, int ranks) {
  ms::Result<std::string> layout = ms::train::describe_layout(config, ranks);
  MS_ASSIGN_OR_RETURN(const LauncherSize launcher, launcher_size());
  if (layout.ok() || opts.ranks > 0 || launcher.ranks == 1) return layout;
  if (layout.ok()) return layout;
  return ms::Status(layout.status().code(),
                    layout.status().message() + " (the " + std::to_string(launcher.ranks) +
                        " ranks are " + launcher.variable + "'s; --ranks N plans for others)");
}

ms::Result<int> train(const TrainOptions& opts) {
  if (opts.config_help) {
    std::cout << ms::config::help_text();
    return 0;
  }
  if (opts.config_path.empty()) {
    return ms::InvalidArgument("no run config given: pass --config <file.yaml> (see configs/)");
  }
  ms::Result<ms::config::RunConfig> config =
      ms::config::load_run_config(opts.config_path, opts.sets);
  if (!config.ok()) return report_config_error(config.status());
  if (opts.dry_run) {
    MS_ASSIGN_OR_RETURN(const int ranks, dry_run_ranks(opts, *config));
    MS_ASSIGN_OR_RETURN(const std::string layout, dry_run_layout(opts, *config, ranks));
    MS_ASSIGN_OR_RETURN(const std::string device, dry_run_device(*config, ranks));
    std::cout << "# resolved from " << opts.config_path << "\n" << ms::config::dump_yaml(*config)
              << device << layout;
    return 0;
  }
  // A device that cannot be used stops the run before MPI, like a bad key: exit 2 naming
  // train.device and what is missing (a CUDA build, a GPU, its driver).
  const ms::Result<ms::Device> device = ms::parse_device(config->train.device);
  if (device.ok() && !device->is_host()) {
    const ms::Result<ms::ops::Backend*> backend = ms::ops::backend_for(*device);
    if (!backend.ok()) {
      ms::cli::Tool::print_running_error("train.device: " + backend.status().message());
      return 2;
    }
  }
  return ms::cli::run_in_world([&](ms::comm::MpiCommunicator& world) {
    return run_training(std::move(*config), world);
  });
}

}  // namespace

int main(int argc, char** argv) {
  ms::cli::Tool tool(
      "ms-train",
      "ms-train: train dense and MoE transformers on an ms-data plan, alone or under `mpirun -np "
      "N` with N = parallel.pp x dp x parallel.cp x parallel.tp model ranks (+ parallel.loaders "
      "data-loader ranks): data parallelism with ZeRO-1, tensor and sequence parallelism, "
      "pipeline stages (1f1b, interleaved, zero-bubble), expert parallelism folded over dp x cp, "
      "context parallelism; dp follows from N. Writes telemetry and checkpoints to run.dir "
      "(locked: one job per run directory) and resumes from them; SIGTERM/SIGUSR1 save and "
      "stop. `ms-train plan` chooses the parallel layout; --config-help lists every key");
  TrainOptions opts;
  CLI::App& app = tool.app();
  ms::cli::add_config_options(&app, &opts.config_path, &opts.sets);
  app.add_flag("--dry-run", opts.dry_run,
               "Resolve and validate the config (file plus --set), print it with the device, the "
               "precision, the expected peak memory per model rank and its parallel layout "
               "(which rank holds which slice of each tensor) and exit");
  app.add_option("--ranks", opts.ranks,
                 "With --dry-run: the number of ranks to lay out (default: the launcher's, or "
                 "parallel.tp + parallel.loaders when run alone)")
      ->check(ms::cli::kPositiveNumber)
      // The dry run prints a line per rank: a count from the flag must not size gigabytes.
      ->check(CLI::Range(1, 1 << 20));
  app.add_flag("--config-help", opts.config_help,
               "List every config key with its type, default and meaning, then exit");
  ms::train::treat_user_signals_as_term();
#if MS_HAVE_CUDA
  ms::kernels::register_cuda_backend();
#endif
  tool.set_default_action([&opts] { return train(opts); });
  ms::cli::add_registered_commands(tool);
  return tool.run(argc, argv);
}
