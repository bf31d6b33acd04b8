// `ms-ckpt list`: the checkpoints of a checkpoints/ directory: step, size on disk, whether each
// is complete (committed with a manifest) or an abandoned temporary directory, and which one
// `latest` names.
#include "cmd/common/registry.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "io/atomic_file.h"

namespace ms::ckpt_cmd {
namespace {

namespace fs = std::filesystem;

struct ListArgs {
  std::string dir;
  bool json = false;
};

uint64_t directory_bytes(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) bytes += e.file_size(ec);
  }
  return bytes;
}

std::string latest_name(const std::string& dir) {
  Result<std::string> text = io::read_file(dir + "/latest");
  if (!text.ok()) return "";
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return fs::path(name).filename().string();
}

Result<nlohmann::ordered_json> list_entries(const std::string& dir) {
  io::Env& env = io::default_env();
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ckpt::list_checkpoints(dir, env));
  const std::string latest = latest_name(dir);
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int64_t step : steps) {
    const std::string name = ckpt::step_dir_name(step);
    rows.push_back({{"name", name}, {"step", step}, {"complete", true},
                    {"bytes", directory_bytes(dir + "/" + name)}, {"latest", name == latest}});
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool temporary = name.starts_with(".tmp") || name.find(".tmp.") != std::string::npos;
    if (e.is_directory(ec) && temporary) {
      rows.push_back({{"name", name}, {"step", nullptr}, {"complete", false},
                      {"bytes", directory_bytes(e.path())}, {"latest", false}});
    }
  }
  return rows;
}

Result<int> run_list(const ListArgs& args) {
  MS_ASSIGN_OR_RETURN(nlohmann::ordered_json rows, list_entries(args.dir));
  if (args.json) {
    std::cout << rows.dump(2) << std::endl;
    return 0;
  }
  std::printf("%-40s %-10s %14s  %s\n", "checkpoint", "state", "bytes", "");
  for (const auto& r : rows) {
    std::printf("%-40s %-10s %14llu  %s\n", r["name"].get<std::string>().c_str(),
                r["complete"].get<bool>() ? "complete" : "incomplete",
                static_cast<unsigned long long>(r["bytes"].get<uint64_t>()),
                r["latest"].get<bool>() ? "<- latest" : "");
  }
  return 0;
}

void add_list_command(cli::Tool& tool) {
  auto args = std::make_shared<ListArgs>();
  CLI::App* sub = tool.add_subcommand(
      "list", "List the checkpoints of a checkpoints/ directory with sizes and the latest",
      [args] { return run_list(*args); });
  sub->add_option("dir", args->dir, "A checkpoints/ directory")->required();
  cli::add_json_flag(sub, &args->json);
}

}  // namespace

MS_CLI_COMMAND(list, add_list_command);

}  // namespace ms::ckpt_cmd
