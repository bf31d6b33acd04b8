// `ms-ckpt inspect`: what a checkpoint holds: step, format and toolkit versions, the layout it
// was saved with (tp, dp, pp, ep, zero), every tensor (dtype, global shape, bytes, shards,
// codecs), data file sizes, the resolved config and the non-tensor state; `--json` for machines.
#include "cmd/common/registry.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "ckpt/manifest.h"

namespace ms::ckpt_cmd {
namespace {

using nlohmann::ordered_json;

struct InspectArgs {
  std::string checkpoint;
  bool json = false;
};

// Bytes per data file, from the shards that point into it.
std::map<std::string, uint64_t> bytes_per_file(const ckpt::Manifest& m) {
  std::map<std::string, uint64_t> out;
  for (const ckpt::TensorRecord& t : m.tensors) {
    for (const ckpt::ShardRecord& s : t.shards) out[s.file] += s.length;
  }
  return out;
}

ordered_json layout_json(const ckpt::Layout& l) {
  return {{"world", l.world}, {"dp", l.dp}, {"tp", l.tp}, {"pp", l.pp}, {"ep", l.ep},
          {"zero", l.zero}};
}

ordered_json describe(const std::string& step_dir, const ckpt::Manifest& m) {
  ordered_json doc;
  doc["step_dir"] = step_dir;
  doc["step"] = m.step;
  doc["format_version"] = m.format_version;
  doc["toolkit_version"] = m.toolkit_version;
  doc["git_revision"] = m.git_revision;
  doc["layout"] = layout_json(m.layout);
  uint64_t total = 0, stored = 0;
  ordered_json tensors = ordered_json::array();
  for (const ckpt::TensorRecord& t : m.tensors) {
    uint64_t t_stored = 0;
    std::map<std::string, int> codecs;
    for (const ckpt::ShardRecord& s : t.shards) {
      t_stored += s.length;
      ++codecs[s.codec];
    }
    tensors.push_back({{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))},
                       {"shape", t.global_shape}, {"bytes", t.bytes()},
                       {"stored_bytes", t_stored}, {"shards", t.shards.size()},
                       {"codecs", codecs}});
    total += t.bytes();
    stored += t_stored;
  }
  doc["tensor_count"] = m.tensors.size();
  doc["tensor_bytes"] = total;
  doc["stored_bytes"] = stored;
  doc["files"] = bytes_per_file(m);
  doc["tensors"] = tensors;
  doc["config"] = m.config_yaml;
  doc["state"] = m.state;
  return doc;
}

void print_text(const ordered_json& d) {
  std::printf("# checkpoint %s\n", d["step_dir"].get<std::string>().c_str());
  std::printf("step             %lld\n", static_cast<long long>(d["step"].get<int64_t>()));
  std::printf("format version   %d\n", d["format_version"].get<int>());
  std::printf("written by       ms %s (git %s)\n", d["toolkit_version"].get<std::string>().c_str(),
              d["git_revision"].get<std::string>().c_str());
  const ordered_json& l = d["layout"];
  std::printf("layout           tp=%d dp=%d pp=%d ep=%d zero=%d (world %d)\n", l["tp"].get<int>(),
              l["dp"].get<int>(), l["pp"].get<int>(), l["ep"].get<int>(), l["zero"].get<int>(),
              l["world"].get<int>());
  std::printf("tensors          %zu, %llu bytes (%llu stored)\n", d["tensor_count"].get<size_t>(),
              static_cast<unsigned long long>(d["tensor_bytes"].get<uint64_t>()),
              static_cast<unsigned long long>(d["stored_bytes"].get<uint64_t>()));
  for (const auto& [file, bytes] : d["files"].items()) {
    std::printf("file             %s  %llu bytes\n", file.c_str(),
                static_cast<unsigned long long>(bytes.get<uint64_t>()));
  }
  std::printf("\n%-60s %-5s %-20s %12s %6s\n", "tensor", "dtype", "shape", "bytes", "shards");
  for (const ordered_json& t : d["tensors"]) {
    std::printf("%-60s %-5s %-20s %12llu %6zu\n", t["name"].get<std::string>().c_str(),
                t["dtype"].get<std::string>().c_str(), t["shape"].dump().c_str(),
                static_cast<unsigned long long>(t["bytes"].get<uint64_t>()),
                t["shards"].get<size_t>());
  }
  std::printf("\n# state\n%s\n\n# config\n%s", d["state"].dump(2).c_str(),
              d["config"].get<std::string>().c_str());
}

Result<int> run_inspect(const InspectArgs& args) {
  MS_ASSIGN_OR_RETURN(std::string step_dir, ckpt::resolve_checkpoint(args.checkpoint));
  MS_ASSIGN_OR_RETURN(ckpt::Manifest m, ckpt::Manifest::read(step_dir));
  const ordered_json doc = describe(step_dir, m);
  if (args.json) {
    std::cout << doc.dump(2) << std::endl;
  } else {
    print_text(doc);
  }
  return 0;
}

void add_inspect_command(cli::Tool& tool) {
  auto args = std::make_shared<InspectArgs>();
  CLI::App* sub = tool.add_subcommand(
      "inspect", "Show a checkpoint's step, layout, tensors, sizes, config and state",
      [args] { return run_inspect(*args); });
  sub->add_option("checkpoint", args->checkpoint,
                  "Step directory, checkpoints/ directory or latest file")->required();
  cli::add_json_flag(sub, &args->json);
}

}  // namespace

MS_CLI_COMMAND(inspect, add_inspect_command);

}  // namespace ms::ckpt_cmd
