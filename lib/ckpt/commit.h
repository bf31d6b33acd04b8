// Publishing a fully written output directory (checkpoint save, offline reshard, safetensors
// export) so that a failure at any point leaves nothing visible. io::commit_directory renames the temporary
// directory into place and then fsyncs the parent; if that last fsync fails the directory is
// already visible although the caller reports failure, so this undoes the rename.
#pragma once

#include <string>

#include "core/status.h"
#include "io/env.h"

namespace ms::ckpt {

// io::commit_directory(env, tmp_dir, final_dir), except that when it fails after the rename the
// directory is moved back to `tmp_dir` (or, failing that, removed), so on any error `final_dir`
// is not created. `tmp_dir`, when still present, is left for the caller to remove.
Status commit_directory_or_undo(io::Env& env, const std::string& tmp_dir,
                                const std::string& final_dir);

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
