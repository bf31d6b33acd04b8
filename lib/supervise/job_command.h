// The job command `ms-diagnose supervise` runs: an mpirun or srun line whose last program is
// ms-train, with placeholders the supervisor fills at every launch: {np} (the rank count; it
// shrinks when machines are removed) and {hostfile} (the file listing the machines still in
// use). The run config is read from ms-train's own --config and --set arguments, so the
// supervisor knows run.dir, the step count and the layout rules without being told twice.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::supervise {

struct JobCommand {
  std::vector<std::string> argv;  // as given, placeholders unfilled
  size_t train_at = 0;            // index of the ms-train program in argv
  std::string config_path;        // ms-train's --config
  std::vector<std::string> sets;  // ms-train's --set values, in order
  bool uses_hostfile = false;     // some argument holds {hostfile}
};

// Finds ms-train (an argument whose file name is "ms-train") and its --config / --set values
// ("--config F", "--config=F", likewise --set). InvalidArgument when there is no ms-train, it
// has no --config, or no argument holds {np}.
Result<JobCommand> parse_job_command(std::vector<std::string> argv);

// The command for one launch: placeholders filled, and `extra_sets` appended as ms-train
// --set arguments after the user's (so they win).
std::vector<std::string> render_job_command(const JobCommand& job, int np,
                                            const std::string& hostfile,
                                            const std::vector<std::string>& extra_sets);

// The run config the job's ms-train would load, with `extra_sets` applied last.
Result<config::RunConfig> load_job_config(const JobCommand& job,
                                          const std::vector<std::string>& extra_sets = {});

// One shell-quoted line, for logs and the event log.
std::string shell_line(const std::vector<std::string>& argv);

}  // namespace ms::supervise
