// The shared shell of every ms-* binary: CLI11 set-up, --help/--version/--log-level, and the
// exit-code contract of the toolkit:
//   0  success, --help, --version
//   1  runtime error (bad input file, I/O or MPI failure): "ms-<tool>: error: <message>"
//   2  usage or parse error (unknown option, bad value):    "ms-<tool>: error: <message>"
// Subcommands register an action returning ms::Status; the action's failure becomes exit 1.
// CLI11's own exceptions are caught here so its exit codes never leak out.
#pragma once

#include <CLI/CLI.hpp>

#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"

namespace ms::cli {

// Exit status of an action that wants something other than 0 on success (ms-diagnose returns
// 3 when it finds a suspect machine).
using Action = std::function<Result<int>()>;

class Tool {
 public:
  // `name` is the binary name ("ms-data"); `description` is the first line of --help.
  Tool(std::string name, std::string description);

  CLI::App& app() { return app_; }
  const std::string& name() const { return name_; }

  // Adds a subcommand whose `action` runs when it is selected.
  CLI::App* add_subcommand(const std::string& name, const std::string& description,
                           Action action);
  // The action to run when no subcommand is given (ms-train trains with none). Without one, the
  // tool prints its help.
  void set_default_action(Action action) { default_action_ = std::move(action); }

  // Parses argv, applies --log-level, runs the selected action and returns the exit code.
  int run(int argc, char** argv);

  // Prints "ms-<tool>: error: <message>" to stderr.
  void print_error(const std::string& message) const;

  // The process's argc/argv as given to run(), for actions that start MPI (MPI_Init wants them).
  static int& argc();
  static char**& argv();
  // What run() is running, for messages: "ms-infer plan", or "ms-train" with no subcommand.
  static const std::string& command();
  // print_error() of the tool that is running, for code that has no Tool at hand (run_in_world).
  static void print_running_error(const std::string& message);

 private:
  // InvalidArgument when the first word of argv that is no option names no subcommand.
  Status check_subcommand(int argc, char** argv) const;

  std::string name_;
  CLI::App app_;
  std::string log_level_ = "info";
  bool log_all_ranks_ = false;
  Action default_action_;
  std::vector<std::pair<CLI::App*, Action>> actions_;
};

// The error for an exception that escaped a subcommand: the command, the exception's type and
// what() when it says more ("unexpected exception in ms-infer plan: std::bad_alloc (out of
// memory: ...)").
Status unexpected_exception(const std::exception& e);

// Shared options, added where they apply.
void add_config_options(CLI::App* app, std::string* config_path, std::vector<std::string>* sets);
void add_json_flag(CLI::App* app, bool* json);

// Numeric flag checks that also refuse NaN and the infinities, which CLI11's PositiveNumber and
// NonNegativeNumber let through (every comparison with NaN is false): `--threshold nan` would
// turn a check off without a word. Use these instead of CLI11's.
extern const CLI::Validator kPositiveNumber;     // finite, above 0
extern const CLI::Validator kNonNegativeNumber;  // finite, at least 0

}  // namespace ms::cli
