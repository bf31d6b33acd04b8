// Where a tool may write its output, and how a directory output is published. Every tool that
// writes a directory or a file next to what it read (quantize, export, import, reshard, dataset
// build, plans) goes through here, so the same three rules hold for all of them:
//   - an output is never one of the inputs, never inside one, and never contains one (compared
//     after resolving links and relative parts, so `-o ./m/` meets `--model m` and a link to m);
//   - an existing non-empty output is refused unless the caller was told to replace it;
//   - a directory is built under a temporary sibling name and renamed into place only once it is
//     complete, so a failure (a full disk, a kill) leaves the old output or nothing, never a mix.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/env.h"

namespace ms::io {

// What an output is checked against, and how the error names it.
struct OutputRules {
  std::vector<std::string> inputs;  // paths read by the run (files or directories; may not exist)
  std::string flag = "--output";    // the option that named the output, for messages
  bool replace = false;             // an existing output may be replaced (e.g. --replace given)
};

// Whether `inner` is `outer` or lies below it, comparing the paths with links and "." / ".."
// resolved for the parts that exist (std::filesystem::weakly_canonical).
bool path_is_within(const std::string& inner, const std::string& outer);

// InvalidArgument naming rules.flag and the input when `output` is, contains or is inside one of
// rules.inputs.
Status check_output_is_not_an_input(const std::string& output, const OutputRules& rules);

// For an output file written atomically: check_output_is_not_an_input, then AlreadyExists when
// `path` exists (a directory is refused always, a file unless rules.replace).
Status check_output_file(Env& env, const std::string& path, const OutputRules& rules);

// For a directory output published by its own staged commit (a checkpoint save):
// check_output_is_not_an_input, then AlreadyExists unless `path` is absent, an empty directory,
// or (with rules.replace) a non-empty directory. A file or a link in the way is refused always.
Status check_output_dir(Env& env, const std::string& path, const OutputRules& rules);

// A directory output under construction. create() checks `output` against the rules (absent,
// an empty directory, or rules.replace), creates its parents and a temporary sibling
// (`<output>.tmp.<pid>.<random>`) to write into. commit() publishes it: the temporary is
// renamed to `final_dir` (io::commit_directory, fsyncs included); an output being replaced is
// first moved aside to `<final_dir>.old.<pid>.<random>` and removed only after the new one is in
// place, moved back when the publishing fails. Destroying an uncommitted StagedDirectory removes
// the temporary, so an error on any path leaves nothing new behind.
class StagedDirectory {
 public:
  static Result<std::unique_ptr<StagedDirectory>> create(Env& env, const std::string& output,
                                                         const OutputRules& rules);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  // Where to write: the temporary directory until commit().
  const std::string& path() const { return staging_; }
  const std::string& final_path() const { return final_; }

  Status commit();

 private:
  StagedDirectory(Env& env, std::string final_dir, std::string staging)
      : env_(env), final_(std::move(final_dir)), staging_(std::move(staging)) {}

  Env& env_;
  std::string final_;
  std::string staging_;
  bool committed_ = false;
};

}  // namespace ms::io
