// Run-directory set-up; see run_dir.h.
#include "train/run_dir.h"

#include "core/logging.h"
#include "io/atomic_file.h"
#include "io/env.h"

namespace ms::train {

Result<io::DirectoryLock> lock_run_directory(const std::string& dir) {
  Result<io::DirectoryLock> lock = io::DirectoryLock::acquire(dir, kRunDirLockName);
  if (lock.ok() || lock.status().code() != StatusCode::kFailedPrecondition) return lock;
  return FailedPrecondition("run.dir " + dir + " is in use by another training job: " +
                            lock.status().message() +
                            "; two jobs on one run directory would mix their telemetry and "
                            "overwrite each other's checkpoints (wait for it to end, or set "
                            "another run.dir)");
}

Status prepare_run_dir(const config::RunConfig& config, const std::string& tokenizer_path) {
  const std::string& dir = config.run.dir;
  MS_RETURN_IF_ERROR(io::default_env().create_dirs(dir));
  MS_RETURN_IF_ERROR(
      io::write_file_atomic(dir + "/config.resolved.yaml", config::dump_yaml(config, true)));
  if (!tokenizer_path.empty()) {
    Result<std::string> tokenizer =
        io::read_file(tokenizer_path, io::kMaxTokenizerFileBytes, "tokenizer");
    if (!tokenizer.ok()) {
      return NotFound("cannot copy the dataset's tokenizer into the run directory: " +
                      tokenizer.status().message());
    }
    MS_RETURN_IF_ERROR(io::write_file_atomic(dir + "/tokenizer.json", *tokenizer));
  }
  return log::set_log_file(dir + "/log.txt");
}

}  // namespace ms::train
