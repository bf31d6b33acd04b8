#include "cmd/common/tool.h"

#include <cxxabi.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <new>
#include <stdexcept>
#include <typeinfo>

#include "core/device_runtime.h"
#include "core/logging.h"
#include "core/version.h"

namespace ms::cli {

Tool::Tool(std::string name, std::string description)
    : name_(std::move(name)), app_(std::move(description), name_) {
  app_.set_version_flag("--version", name_ + " " + ms::version_string(),
                        "Print the toolkit version and git revision, then exit");
  app_.add_option("--log-level", log_level_, "Log verbosity: debug, info, warn, error or off")
      ->capture_default_str();
  app_.add_flag("--log-all-ranks", log_all_ranks_,
                "Print info lines from every rank, not only rank 0");
  app_.require_subcommand(0, 1);
  app_.footer("Report bugs with the output of '" + name_ + " --version'.");
}

CLI::App* Tool::add_subcommand(const std::string& name, const std::string& description,
                               Action action) {
  CLI::App* sub = app_.add_subcommand(name, description);
  actions_.emplace_back(sub, std::move(action));
  return sub;
}

void Tool::print_error(const std::string& message) const {
  std::cerr << name_ << ": error: " << message << std::endl;
}

namespace {

std::string& running_command() {
  static std::string name;
  return name;
}

std::string& running_tool() {
  static std::string name = "ms";
  return name;
}

std::string demangled(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> text(abi::__cxa_demangle(name, nullptr, nullptr, &status),
                                              std::free);
  return status == 0 && text ? std::string(text.get()) : std::string(name);
}

// The first argument that is neither an option of `app` nor an option's value: the subcommand
// the user meant, or nothing.
const char* first_word(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") return nullptr;
    if (arg.size() < 2 || arg[0] != '-') return argv[i];
    if (arg.find('=') != std::string::npos) continue;
    const CLI::Option* option = app.get_option_no_throw(arg);
    if (option == nullptr) return nullptr;  // an unknown option: CLI11 names it
    // A flag (expected 0 times a value) takes none, whatever its type's size says.
    if (option->get_expected_max() > 0 && option->get_type_size_max() > 0) ++i;  // its value
  }
  return nullptr;
}

}  // namespace

// CLI11 takes an unknown word for an extra argument and, when --help follows, prints the
// tool's help and exits 0, so `ms-ckpt shrink --help` looked like a command that exists. The word
// is checked against the subcommands before CLI11 parses anything.
Status Tool::check_subcommand(int argc, char** argv) const {
  const char* word = first_word(app_, argc, argv);
  if (word == nullptr) return Status::OK();
  std::string names;
  for (const auto& [sub, action] : actions_) {
    if (sub->check_name(word)) return Status::OK();
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return InvalidArgument("unknown subcommand '" + std::string(word) + "'" +
                         (names.empty() ? " (" + name_ + " has none)"
                                        : " (" + name_ + " has: " + names + ")"));
}

const std::string& Tool::command() { return running_command(); }

void Tool::print_running_error(const std::string& message) {
  std::cerr << running_tool() << ": error: " << message << std::endl;
}

Status unexpected_exception(const std::exception& e) {
  const std::string type = demangled(typeid(e).name());
  std::string message = "unexpected exception in " + Tool::command() + ": " + type;
  // A container asked for more elements than it can hold: its what() names a library internal
  // ("vector::_M_default_append"), which tells the user nothing.
  if (dynamic_cast<const std::length_error*>(&e) != nullptr) {
    return Internal(message + " (a count too large for memory: an input probably claims a size "
                              "larger than it is; please report which input did it)");
  }
  if (dynamic_cast<const DeviceOutOfMemory*>(&e) != nullptr) {
    // The allocator's message already names the device and the sizes.
    return Unavailable(Tool::command() + ": " + e.what());
  }
  if (type != e.what()) message += std::string(": ") + e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) {
    message += " (out of memory: an input probably claims a size larger than it is; "
               "please report which input did it)";
  }
  return Internal(std::move(message));
}

int& Tool::argc() {
  static int value = 0;
  return value;
}

char**& Tool::argv() {
  static char** value = nullptr;
  return value;
}

int Tool::run(int argc, char** argv) {
  Tool::argc() = argc;
  Tool::argv() = argv;
  if (Status known = check_subcommand(argc, argv); !known.ok()) {
    print_error(known.message());
    std::cerr << "Run '" << name_ << " --help' for usage." << std::endl;
    return 2;
  }
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app_.exit(e);  // --help or --version: printed on stdout
    print_error(e.what());
    std::cerr << "Run '" << name_ << " --help' for usage." << std::endl;
    return 2;
  }
  Result<log::Level> level = log::parse_level(log_level_);
  if (!level.ok()) {
    print_error(level.status().message());
    return 2;
  }
  log::set_level(*level);
  log::set_all_ranks(log_all_ranks_);

  const Action* chosen = nullptr;
  for (const auto& [sub, action] : actions_) {
    if (sub->parsed()) chosen = &action;
  }
  if (!chosen && default_action_) chosen = &default_action_;
  if (!chosen) {
    std::cout << app_.help();
    return 0;
  }
  running_tool() = name_;
  running_command() = name_;
  for (const auto& [sub, action] : actions_) {
    if (&action == chosen) running_command() = name_ + " " + sub->get_name();
  }
  Result<int> outcome = 0;
  try {
    outcome = (*chosen)();
  } catch (const std::exception& e) {
    outcome = unexpected_exception(e);
  }
  if (!outcome.ok()) {
    print_error(outcome.status().message());
    return 1;
  }
  return *outcome;
}

void add_config_options(CLI::App* app, std::string* config_path, std::vector<std::string>* sets) {
  app->add_option("--config", *config_path, "YAML config file (see docs/config.md)")
      ->check(CLI::ExistingFile);
  app->add_option("--set", *sets,
                  "Override a config key, e.g. --set train.steps=100 (repeatable)")
      ->allow_extra_args(false);
}

void add_json_flag(CLI::App* app, bool* json) {
  app->add_flag("--json", *json, "Print machine-readable JSON instead of a table");
}

namespace {

// A validator for a finite number above `min` (or at least it, with `min_allowed`).
CLI::Validator finite_number(double min, bool min_allowed, const std::string& range) {
  return CLI::Validator(
      [min, min_allowed, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size()) {
          return "'" + text + "' is not a number";
        }
        if (!std::isfinite(value) || value < min || (value == min && !min_allowed)) {
          return "must be a finite number " + range + " (got " + text + ")";
        }
        return std::string();
      },
      range == "above 0" ? "POSITIVE" : "NONNEGATIVE");
}

}  // namespace

const CLI::Validator kPositiveNumber = finite_number(0, false, "above 0");
const CLI::Validator kNonNegativeNumber = finite_number(0, true, "at least 0");

}  // namespace ms::cli
