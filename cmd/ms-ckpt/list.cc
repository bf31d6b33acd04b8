// `ms-ckpt list`: the checkpoints of a checkpoints/ directory: step, size on disk, whether each
// is complete (committed with a manifest) or a temporary an interrupted save or reshard left
// (ckpt::is_temporary_name), and which one `latest` names (ckpt::read_latest, the one parser of
// that file).
#include "cmd/common/registry.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"

namespace ms::ckpt_cmd {
namespace {

namespace fs = std::filesystem;

struct ListArgs {
  std::string dir;
  bool json = false;
};

// Bytes of the files under `dir` (or of `dir` itself when it is a file, as latest.tmp.* is).
uint64_t directory_bytes(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  if (fs::is_regular_file(dir, ec)) return fs::file_size(dir, ec);
  for (const auto& e : fs::recursive_directory_iterator(dir, ec)) {
    if (e.is_regular_file(ec)) bytes += e.file_size(ec);
  }
  return bytes;
}

Result<nlohmann::ordered_json> list_entries(const std::string& dir) {
  io::Env& env = io::default_env();
  MS_ASSIGN_OR_RETURN(std::vector<int64_t> steps, ckpt::list_checkpoints(dir, env));
  // A missing or damaged `latest` marks no row; `ms-ckpt verify DIR` reports the damage.
  const Result<std::string> named = ckpt::read_latest(dir + "/latest", env);
  const std::string latest = named.ok() ? *named : "";
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (int64_t step : steps) {
    const std::string name = ckpt::step_dir_name(step);
    rows.push_back({{"name", name}, {"step", step}, {"complete", true},
                    {"bytes", directory_bytes(dir + "/" + name)}, {"latest", name == latest}});
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (ckpt::is_temporary_name(name)) {
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
