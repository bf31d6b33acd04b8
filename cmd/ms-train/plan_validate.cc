// Training the plan's candidates; see plan_validate.h.
#include "cmd/ms-train/plan_validate.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "supervise/job_process.h"
#include "telemetry/reader.h"

namespace ms::cli {
namespace {

// The launcher's words with {ranks} filled in.
std::vector<std::string> launcher_words(const std::string& launcher, int ranks) {
  std::vector<std::string> out;
  std::istringstream in(launcher);
  for (std::string word; in >> word;) {
    for (size_t at; (at = word.find("{ranks}")) != std::string::npos;) {
      word.replace(at, 7, std::to_string(ranks));
    }
    out.push_back(word);
  }
  return out;
}

Result<std::string> this_binary() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return Internal("--validate: cannot find this ms-train binary: " + ec.message());
  return exe.string();
}

// A fresh directory under `parent` for this validation's runs.
Result<std::string> fresh_dir(const std::string& parent) {
  std::string pattern =
      (parent.empty() ? std::string("/tmp") : parent) + "/ms-plan-validate-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    return IOError("--validate: cannot make a run directory under " +
                   (parent.empty() ? std::string("/tmp") : parent) + ": " + std::strerror(errno));
  }
  return pattern;
}

// The end of a failed run's output, for its error.
std::string tail(const std::string& text, size_t lines) {
  size_t at = text.size();
  for (size_t n = 0; n <= lines && at > 0; ++n) at = text.rfind('\n', at - 1);
  return at == std::string::npos ? text : text.substr(at + 1);
}

Result<double> train_one(const ValidateOptions& o, const std::string& exe, const std::string& dir,
                         size_t index, const plan::Layout& layout) {
  const std::string run_dir = dir + "/" + std::to_string(index);
  std::vector<std::string> argv = launcher_words(o.launcher, o.world);
  argv.insert(argv.end(), {exe, "--config", o.config_path});
  for (const std::string& s : o.sets) argv.insert(argv.end(), {"--set", s});
  for (const std::string& s : plan::set_flags(layout)) argv.insert(argv.end(), {"--set", s});
  const std::vector<std::string> run_sets = {
      "run.dir=" + run_dir, "train.steps=" + std::to_string(o.steps), "train.eval_every=0",
      "checkpoint.every=0", "checkpoint.resume=none", "telemetry.trace=false"};
  for (const std::string& s : run_sets) {
    argv.insert(argv.end(), {"--set", s});
  }
  const std::string log = run_dir + ".log";
  std::cerr << "# validate: training " << plan::layout_name(layout) << " for " << o.steps
            << " steps on " << o.world << " ranks (" << log << ")\n";
  MS_ASSIGN_OR_RETURN(std::unique_ptr<supervise::JobProcess> job,
                      supervise::JobProcess::start(argv, {}, log, false));
  std::optional<int> status;
  while (!(status = job->poll())) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (*status != 0) {
    return InvalidArgument("--validate: " + plan::layout_name(layout) + " exited with " +
                           std::to_string(*status) + " (log " + log + "):\n" +
                           tail(job->output(), 10));
  }
  MS_ASSIGN_OR_RETURN(const std::vector<telemetry::RankTelemetry> ranks,
                      telemetry::read_telemetry_dir(run_dir + "/telemetry"));
  std::vector<std::pair<int64_t, double>> steps;
  for (const telemetry::StepRecordRead& s : ranks.front().steps) {
    steps.emplace_back(s.step.step, s.step.step_s);
  }
  Result<double> seconds = plan::measured_step_seconds(std::move(steps));
  if (!seconds.ok()) {
    return InvalidArgument("--validate: " + plan::layout_name(layout) + ": " +
                           seconds.status().message() + " (" + run_dir + "/telemetry)");
  }
  return *seconds;
}

}  // namespace

Result<std::vector<plan::ValidatedLayout>> validate_layouts(const ValidateOptions& options,
                                                            const plan::SearchResult& result) {
  MS_ASSIGN_OR_RETURN(const std::string exe, this_binary());
  MS_ASSIGN_OR_RETURN(const std::string dir, fresh_dir(options.dir));
  std::vector<plan::ValidatedLayout> out;
  for (size_t i : plan::validation_candidates(result, options.candidates)) {
    const plan::Prediction& p = result.ranked[i];
    MS_ASSIGN_OR_RETURN(const double measured, train_one(options, exe, dir, out.size(), p.layout));
    out.push_back({p, measured});
  }
  return out;
}

}  // namespace ms::cli
