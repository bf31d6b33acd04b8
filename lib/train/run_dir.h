// The run directory (run.dir) as rank 0 sets it up before training: the resolved config with
// every key's description, the log file, and a copy of the tokenizer the data was built with,
// so the directory alone says what was trained on what. Per-rank telemetry/ and trace/ are
// created by their writers (lib/telemetry); checkpoints/ by the checkpoint writer.
#pragma once

#include <string>

#include "config/run_config.h"
#include "core/status.h"
#include "io/directory_lock.h"

namespace ms::train {

// The lock file of a run directory's training job (io::DirectoryLock).
inline constexpr char kRunDirLockName[] = "train.lock";

// Locks `dir` (run.dir) for one training job, creating it when missing. FailedPrecondition
// naming the holder's pid and host when another job holds it.
Result<io::DirectoryLock> lock_run_directory(const std::string& dir);

// Creates run.dir (and parents), writes config.resolved.yaml atomically, copies
// `tokenizer_path` to tokenizer.json when it is not empty, and starts appending the log to
// log.txt. IOError/NotFound naming the path that failed.
Status prepare_run_dir(const config::RunConfig& config, const std::string& tokenizer_path);

}  // namespace ms::train
