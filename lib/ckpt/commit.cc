// Undoing a commit whose last step failed (see commit.h).
#include "ckpt/commit.h"

#include "ckpt/manifest.h"
#include "io/atomic_file.h"

namespace ms::ckpt {

Status undo_commit(io::Env& env, const std::string& dir, Status cause) {
  Status removed = env.remove_all(dir);
  if (removed.ok()) return cause;
  return Status(cause.code(), cause.message() + "; removing " + dir + " failed too (" +
                                  removed.message() + "): delete it by hand");
}

// Points `latest` at the just committed `final_dir`. When that fails, the previous `latest` is
// put back (the new one may already be in place when only the directory fsync failed) and the
// new step directory removed, so the output holds no new checkpoint and `latest` never names a
// removed one. Should putting it back fail too, the complete new checkpoint is kept for it.
Status publish_latest(io::Env& env, const std::string& checkpoints_dir,
                      const std::string& step_name, const std::string& final_dir) {
  const std::string latest = checkpoints_dir + "/latest";
  const Result<std::string> previous =
      io::read_file(env, latest, io::kMaxConfigFileBytes, "latest file");
  const std::string text = latest_file_text(step_name);
  const Status written = io::write_file_atomic(env, latest, text);
  if (written.ok()) return written;
  // When `latest` already named this step (a step saved again), there is nothing to put back.
  const bool unchanged = previous.ok() && *previous == text;
  const Result<std::string> now =
      io::read_file(env, latest, io::kMaxConfigFileBytes, "latest file");
  if (!unchanged && now.ok() && *now == text) {
    const Status restored = previous.ok() ? io::write_file_atomic(env, latest, *previous)
                                          : env.remove_file(latest);
    if (!restored.ok()) {
      return Status(written.code(), written.message() + "; " + latest + " names the new, " +
                                        "complete " + step_name + " since restoring it failed: " +
                                        restored.message());
    }
  }
  return undo_commit(env, final_dir, written);
}

}  // namespace ms::ckpt
