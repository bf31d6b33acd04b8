// Listing, choosing and pruning the step directories of a checkpoints/ directory. Only complete
// checkpoints (a step-XXXXXXXX directory with manifest.json) count; the one `latest` names is
// never removed, so retention can never leave a run without its newest checkpoint, and
// `resume: auto` falls back to the newest complete one when `latest` is damaged or dangling.
#include <algorithm>

#include "ckpt/checkpoint.h"
#include "io/atomic_file.h"

namespace ms::ckpt {

bool is_temporary_name(std::string_view name) {
  return name.starts_with(".tmp-step-") || name.starts_with(".old-step-") ||
         ((name.starts_with("step-") || name.starts_with("latest")) &&
          (name.find(".tmp.") != std::string_view::npos ||
           name.find(".old.") != std::string_view::npos));
}

Result<std::vector<int64_t>> list_checkpoints(const std::string& checkpoints_dir, io::Env& env) {
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> names, env.list_dir(checkpoints_dir));
  std::vector<int64_t> steps;
  for (const std::string& name : names) {
    const int64_t step = parse_step_dir_name(name);
    if (step >= 0 && env.exists(checkpoints_dir + "/" + name + "/manifest.json")) {
      steps.push_back(step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

Result<AutoResumeChoice> newest_complete_checkpoint(const std::string& checkpoints_dir,
                                                    io::Env& env) {
  AutoResumeChoice choice;
  if (!env.is_directory(checkpoints_dir)) return choice;
  const std::string latest = checkpoints_dir + "/latest";
  std::string problem = latest + " is missing";
  if (env.exists(latest)) {
    Result<std::string> followed = resolve_checkpoint(latest, env);
    if (followed.ok()) {
      choice.step_dir = *followed;
      return choice;
    }
    problem = followed.status().message();
  }
  MS_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, list_checkpoints(checkpoints_dir, env));
  if (steps.empty()) {
    if (env.exists(latest)) {
      choice.warning = problem + "; no complete checkpoint is left in " + checkpoints_dir +
                       ", starting fresh";
    }
    return choice;
  }
  choice.step_dir = checkpoints_dir + "/" + step_dir_name(steps.back());
  choice.warning = problem + "; resuming from the newest complete checkpoint, " + choice.step_dir;
  return choice;
}

Result<PruneReport> prune_checkpoints(const std::string& checkpoints_dir, int64_t keep,
                                      bool remove_temporaries, io::Env& env) {
  if (keep < 1) return InvalidArgument("keep must be at least 1, got " + std::to_string(keep));
  MS_ASSIGN_OR_RETURN(const std::vector<int64_t> steps, list_checkpoints(checkpoints_dir, env));
  // A damaged `latest` protects nothing, but it also makes this refuse to guess: retention
  // only runs on a directory whose newest checkpoint is known.
  std::string protected_name;
  if (env.exists(checkpoints_dir + "/latest")) {
    MS_ASSIGN_OR_RETURN(protected_name, read_latest(checkpoints_dir + "/latest", env));
  }
  PruneReport report;
  const size_t remove_count = steps.size() > static_cast<size_t>(keep)
                                  ? steps.size() - static_cast<size_t>(keep) : 0;
  for (size_t i = 0; i < remove_count; ++i) {
    const std::string name = step_dir_name(steps[i]);
    if (name == protected_name) continue;
    const std::string path = checkpoints_dir + "/" + name;
    if (env.is_symlink(path)) {
      report.left_alone.push_back(path + " is a symbolic link; retention does not remove what "
                                  "another directory owns (remove the link by hand)");
      continue;
    }
    MS_RETURN_IF_ERROR(env.remove_all(path));
    report.removed.push_back(name);
  }
  if (remove_temporaries) {
    MS_ASSIGN_OR_RETURN(const std::vector<std::string> names, env.list_dir(checkpoints_dir));
    for (const std::string& name : names) {
      if (!is_temporary_name(name)) continue;
      MS_RETURN_IF_ERROR(env.remove_all(checkpoints_dir + "/" + name));
      report.removed.push_back(name);
    }
  }
  return report;
}

}  // namespace ms::ckpt
