// Output checks and staged directories (see output_path.h). Paths are compared after
// std::filesystem::weakly_canonical, which resolves links and "." / ".." for the parts of a path
// that exist and keeps the rest as written: an output that does not exist yet still meets an
// input it would land inside.
#include "io/output_path.h"

#include <filesystem>
#include <system_error>

#include "core/logging.h"
#include "io/atomic_file.h"

namespace ms::io {
namespace {

namespace fs = std::filesystem;

fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) absolute = fs::path(path);
  fs::path canonical = fs::weakly_canonical(absolute, ec);
  if (ec) canonical = absolute.lexically_normal();
  // "a/b/" and "a/b" are the same directory.
  if (!canonical.has_filename() && canonical.has_parent_path()) canonical = canonical.parent_path();
  return canonical;
}

bool is_within(const fs::path& inner, const fs::path& outer) {
  auto i = inner.begin();
  for (auto o = outer.begin(); o != outer.end(); ++o, ++i) {
    if (i == inner.end() || *i != *o) return false;
  }
  return true;
}

Status existing_output(const std::string& path, const std::string& what, const OutputRules& rules) {
  return AlreadyExists(rules.flag + " " + path + " " + what + "; choose another " + rules.flag +
                       " or pass --replace to replace it (the old output is removed only once "
                       "the new one is complete)");
}

}  // namespace

bool path_is_within(const std::string& inner, const std::string& outer) {
  return is_within(resolved(inner), resolved(outer));
}

Status check_output_is_not_an_input(const std::string& output, const OutputRules& rules) {
  if (output.empty()) return InvalidArgument(rules.flag + " is empty");
  const fs::path out = resolved(output);
  for (const std::string& input : rules.inputs) {
    if (input.empty()) continue;
    const fs::path in = resolved(input);
    const char* relation = nullptr;
    if (out == in) {
      relation = "is";
    } else if (is_within(out, in)) {
      relation = "is inside";
    } else if (is_within(in, out)) {
      relation = "contains";
    }
    if (relation == nullptr) continue;
    return InvalidArgument(rules.flag + " " + output + " " + relation + " the input " + input +
                           (out == in ? "" : " (" + in.string() + ")") +
                           "; writing there would overwrite or mix with what this run reads, "
                           "so choose an output outside every input");
  }
  return Status::OK();
}

Status check_output_file(Env& env, const std::string& path, const OutputRules& rules) {
  MS_RETURN_IF_ERROR(check_output_is_not_an_input(path, rules));
  if (env.is_directory(path)) {
    return AlreadyExists(rules.flag + " " + path + " is a directory; a file was expected");
  }
  if (!env.exists(path)) return Status::OK();
  MS_RETURN_IF_ERROR(check_replaceable_file(path, rules.flag + " " + path));
  if (!rules.replace) return existing_output(path, "already exists", rules);
  return Status::OK();
}

Status check_output_dir(Env& env, const std::string& path, const OutputRules& rules) {
  MS_RETURN_IF_ERROR(check_output_is_not_an_input(path, rules));
  if (!env.exists(path)) return Status::OK();
  if (!env.is_directory(path) || env.is_symlink(path)) {
    return AlreadyExists(rules.flag + " " + path + " exists and is not a directory; choose "
                         "another " + rules.flag);
  }
  MS_ASSIGN_OR_RETURN(const std::vector<std::string> names, env.list_dir(path));
  if (!names.empty() && !rules.replace) {
    return existing_output(path, "exists and is not empty (" + std::to_string(names.size()) +
                                     " entries)", rules);
  }
  return Status::OK();
}

Result<std::unique_ptr<StagedDirectory>> StagedDirectory::create(Env& env,
                                                                 const std::string& output,
                                                                 const OutputRules& rules) {
  // "out/" names the directory out: its siblings are out.tmp.*, not out/.tmp.*.
  std::string final_dir = output;
  while (final_dir.size() > 1 && final_dir.back() == '/') final_dir.pop_back();
  MS_RETURN_IF_ERROR(check_output_dir(env, final_dir, rules));
  const std::string parent = parent_dir(final_dir);
  MS_RETURN_IF_ERROR(env.create_dirs(parent));
  Status last;
  // A clash of two random 64-bit names is next to impossible; a few tries cover it anyway.
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::string staging = temp_sibling_name(final_dir);
    if (env.exists(staging)) continue;
    last = env.create_dir(staging);
    if (last.ok()) {
      return std::unique_ptr<StagedDirectory>(new StagedDirectory(env, final_dir, staging));
    }
  }
  return last.with_context("cannot create a temporary directory beside " + final_dir);
}

StagedDirectory::~StagedDirectory() {
  if (committed_) return;
  Status removed = env_.remove_all(staging_);
  if (!removed.ok()) MS_LOG(Warn) << "could not remove " << staging_ << ": " << removed.message();
}

Status StagedDirectory::commit() {
  std::string old;
  if (env_.exists(final_)) {
    MS_ASSIGN_OR_RETURN(const std::vector<std::string> names, env_.list_dir(final_));
    if (!names.empty()) {
      old = sibling_name(final_, "old");
      MS_RETURN_IF_ERROR(env_.rename(final_, old));
    }
  }
  Status st = commit_directory(env_, staging_, final_);
  if (!st.ok()) {
    if (!old.empty() && !env_.exists(final_)) {
      Status back = env_.rename(old, final_);
      if (!back.ok()) {
        return st.with_context("the old output is kept as " + old + " (moving it back failed: " +
                               back.message() + ")");
      }
    }
    return st;
  }
  committed_ = true;
  if (!old.empty()) {
    Status removed = env_.remove_all(old);
    if (!removed.ok()) {
      return removed.with_context(final_ + " is in place, but the output it replaced, moved "
                                  "aside to " + old + ", could not be removed");
    }
  }
  return Status::OK();
}

}  // namespace ms::io
