// `ms-ckpt verify`: the manifest's structure and every shard's crc32c (lib/ckpt/verify.h). Exit 0
// when intact; exit 1 with one "ms-ckpt: error:" summary after a line per damaged shard naming
// the file, the byte offset and the tensor.
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "ckpt/verify.h"
#include "data/progress.h"

namespace ms::ckpt_cmd {
namespace {

Result<int> run_verify(const std::string& checkpoint) {
  data::Progress progress("verify " + checkpoint, 0);
  MS_ASSIGN_OR_RETURN(
      ckpt::VerifyReport report,
      ckpt::verify_checkpoint(checkpoint, io::default_env(),
                              [&](uint64_t done, uint64_t) { progress.update(done); }));
  progress.finish();
  for (const std::string& problem : report.problems) {
    std::printf("DAMAGED %s/%s\n", report.step_dir.c_str(), problem.c_str());
  }
  if (!report.ok()) {
    return Corruption(report.step_dir + ": " + std::to_string(report.problems.size()) +
                      " damaged shard(s) of " + std::to_string(report.shards) +
                      "; the first: " + report.problems.front());
  }
  std::printf("OK %s: %zu tensors, %zu shards, %llu bytes, every crc32c matches\n",
              report.step_dir.c_str(), report.tensors, report.shards,
              static_cast<unsigned long long>(report.bytes));
  return 0;
}

void add_verify_command(cli::Tool& tool) {
  auto checkpoint = std::make_shared<std::string>();
  CLI::App* sub = tool.add_subcommand(
      "verify", "Check a checkpoint's manifest and the crc32c of every stored shard",
      [checkpoint] { return run_verify(*checkpoint); });
  sub->add_option("checkpoint", *checkpoint,
                  "Step directory, checkpoints/ directory or latest file")->required();
}

}  // namespace

MS_CLI_COMMAND(verify, add_verify_command);

}  // namespace ms::ckpt_cmd
