// ms-train: trains with no subcommand, as one process or under `mpirun -np N` (one
// data-parallel rank per process). --dry-run resolves and validates a config without starting
// MPI; --config-help prints the config reference. The loop itself is ms::train::Trainer.
#include <mpi.h>

#include <cstdlib>
#include <iostream>

#include "cmd/common/tool.h"
#include "comm/mpi_communicator.h"
#include "config/run_config.h"
#include "core/logging.h"
#include "train/trainer.h"

namespace {

struct TrainOptions {
  std::string config_path;
  std::vector<std::string> sets;
  bool dry_run = false;
  bool config_help = false;
};

// Exit status after a failed step of training. A failure every rank knows about ends the job
// normally: the reporting rank prints it, then every rank waits at a barrier before exiting,
// because mpirun ends the job as soon as one rank exits non-zero and would cut the message off.
// A failure only this rank hit would leave the others blocked in a collective, so it takes the
// whole job down.
ms::Result<int> report_failure(const ms::cli::Tool& tool, const ms::Status& status,
                               bool collective, ms::comm::Communicator& world) {
  if (world.size() == 1) return status;
  if (!collective) {
    tool.print_error(status.message() + " (aborting every rank)");
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
  }
  if (!ms::train::reported_by_another_rank(status)) tool.print_error(status.message());
  (void)world.barrier();
  return 1;
}

// The rank the launcher gave this process (mpirun, srun), before MPI is started; 0 when run
// alone. Config errors are found before MPI starts, identically on every rank, so only the
// first rank prints them.
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
}

// The number of processes the launcher started (mpirun, srun); 1 when run alone.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 1;
}

// A config error, found identically on every rank before MPI starts. Alone, it is returned
// (and printed by the tool); under a launcher with several ranks the first rank prints it and
// every rank waits for that at a barrier before exiting (see report_failure).
ms::Result<int> report_config_error(const ms::cli::Tool& tool, const ms::Status& status) {
  if (launcher_size() <= 1) return status;
  if (launcher_rank() == 0) tool.print_error(status.message());
  MS_RETURN_IF_ERROR(ms::comm::init(ms::cli::Tool::argc(), ms::cli::Tool::argv()));
  if (ms::Result<std::unique_ptr<ms::comm::MpiCommunicator>> world =
          ms::comm::MpiCommunicator::world();
      world.ok()) {
    (void)(*world)->barrier();
  }
  (void)ms::comm::finalize();
  return 1;
}

ms::Result<int> run_training(const ms::cli::Tool& tool, ms::config::RunConfig config) {
  MS_ASSIGN_OR_RETURN(auto world, ms::comm::MpiCommunicator::world());
  ms::Result<std::unique_ptr<ms::train::Trainer>> trainer =
      ms::train::Trainer::create(std::move(config), *world);
  if (!trainer.ok()) return report_failure(tool, trainer.status(), true, *world);
  ms::Result<ms::train::TrainSummary> summary = (*trainer)->run();
  if (!summary.ok()) {
    return report_failure(tool, summary.status(), (*trainer)->failure_is_collective(), *world);
  }
  MS_LOG(Info) << "done: " << summary->steps_done << " steps"
               << (summary->stopped_by_signal ? " (stopped by a signal)" : "") << "; run dir "
               << (*trainer)->config().run.dir;
  return 0;
}

ms::Result<int> train(const ms::cli::Tool& tool, const TrainOptions& opts) {
  if (opts.config_help) {
    std::cout << ms::config::help_text();
    return 0;
  }
  if (opts.config_path.empty()) {
    return ms::InvalidArgument("no run config given: pass --config <file.yaml> (see configs/)");
  }
  ms::Result<ms::config::RunConfig> config =
      ms::config::load_run_config(opts.config_path, opts.sets);
  if (!config.ok()) return report_config_error(tool, config.status());
  if (opts.dry_run) {
    std::cout << "# resolved from " << opts.config_path << "\n" << ms::config::dump_yaml(*config);
    return 0;
  }
  MS_RETURN_IF_ERROR(ms::comm::init(ms::cli::Tool::argc(), ms::cli::Tool::argv()));
  ms::Result<int> code = run_training(tool, std::move(*config));
  const ms::Status finalized = ms::comm::finalize();
  if (code.ok() && !finalized.ok()) return finalized;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-train",
                     "ms-train: train dense and MoE transformers with data parallelism (ZeRO-1) "
                     "over MPI; run under `mpirun -np N` for N data-parallel ranks");
  TrainOptions opts;
  CLI::App& app = tool.app();
  ms::cli::add_config_options(&app, &opts.config_path, &opts.sets);
  app.add_flag("--dry-run", opts.dry_run,
               "Resolve and validate the config (file plus --set), print it and exit");
  app.add_flag("--config-help", opts.config_help,
               "List every config key with its type, default and meaning, then exit");
  tool.set_default_action([&tool, &opts] { return train(tool, opts); });
  return tool.run(argc, argv);
}
