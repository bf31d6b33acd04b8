#include "supervise/job_command.h"

#include <filesystem>

namespace ms::supervise {
namespace {

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

// The value of option `name` at argv[i] ("--name V" or "--name=V"); advances i past it.
bool option_value(const std::vector<std::string>& argv, size_t& i, const std::string& name,
                  std::string* value) {
  const std::string& arg = argv[i];
  if (arg == name && i + 1 < argv.size()) {
    *value = argv[++i];
    return true;
  }
  if (arg.rfind(name + "=", 0) == 0) {
    *value = arg.substr(name.size() + 1);
    return true;
  }
  return false;
}

}  // namespace

Result<JobCommand> parse_job_command(std::vector<std::string> argv) {
  JobCommand job;
  bool found = false, np = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i].find("{np}") != std::string::npos) np = true;
    if (argv[i].find("{hostfile}") != std::string::npos) job.uses_hostfile = true;
    if (std::filesystem::path(argv[i]).filename() == "ms-train") {
      job.train_at = i;
      found = true;
    }
  }
  if (!found) {
    return InvalidArgument("the job command runs no ms-train (expected e.g. `mpirun -np {np} "
                           "ms-train --config run.yaml`)");
  }
  if (!np) {
    return InvalidArgument("no argument of the job command holds {np}: the supervisor must set "
                           "the rank count (e.g. `mpirun -np {np} ...`)");
  }
  for (size_t i = job.train_at + 1; i < argv.size(); ++i) {
    std::string value;
    if (option_value(argv, i, "--config", &value)) {
      job.config_path = value;
    } else if (option_value(argv, i, "--set", &value)) {
      job.sets.push_back(value);
    }
  }
  if (job.config_path.empty()) {
    return InvalidArgument("the job's ms-train has no --config: the supervisor reads run.dir "
                           "and the layout from it");
  }
  job.argv = std::move(argv);
  return job;
}

std::vector<std::string> render_job_command(const JobCommand& job, int np,
                                            const std::string& hostfile,
                                            const std::vector<std::string>& extra_sets) {
  std::vector<std::string> out;
  for (std::string arg : job.argv) {
    replace_all(arg, "{np}", std::to_string(np));
    replace_all(arg, "{hostfile}", hostfile);
    out.push_back(std::move(arg));
  }
  for (const std::string& set : extra_sets) {
    out.push_back("--set");
    out.push_back(set);
  }
  return out;
}

Result<config::RunConfig> load_job_config(const JobCommand& job,
                                          const std::vector<std::string>& extra_sets) {
  std::vector<std::string> sets = job.sets;
  sets.insert(sets.end(), extra_sets.begin(), extra_sets.end());
  return config::load_run_config(job.config_path, sets);
}

std::string shell_line(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) {
    if (!line.empty()) line += ' ';
    const bool plain = !arg.empty() && arg.find_first_not_of(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%{}") ==
        std::string::npos;
    if (plain) {
      line += arg;
      continue;
    }
    std::string quoted = arg;
    replace_all(quoted, "'", "'\\''");
    line += "'" + quoted + "'";
  }
  return line;
}

}  // namespace ms::supervise
