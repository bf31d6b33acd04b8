// The steps after io::commit_directory when publishing a checkpoint (training save, offline
// reshard): pointing `latest` at the new step directory, and taking the directory back when
// that fails, so a failure at any point leaves nothing new visible. (io::commit_directory
// itself never leaves `final_dir` behind on failure.)
#pragma once

#include <string>

#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// Removes `dir`, a directory this process committed a moment ago, after a later step of the
// same commit failed (`cause`). Returns `cause`, extended with the removal's error if that fails
// too, so the caller reports what happened and what may be left.
Status undo_commit(io::Env& env, const std::string& dir, Status cause);

// Points checkpoints_dir/latest at `step_name`, the step directory `final_dir` just committed.
// When that fails, the previous `latest` is put back (the new one may already be in place when
// only the directory fsync failed) and `final_dir` removed, so no new checkpoint is left and
// `latest` never names a removed one. Should putting it back fail too, the complete new
// checkpoint is kept for it and the error says so.
Status publish_latest(io::Env& env, const std::string& checkpoints_dir,
                      const std::string& step_name, const std::string& final_dir);

}  // namespace ms::ckpt
