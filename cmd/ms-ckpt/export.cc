// `ms-ckpt export`: a checkpoint's model weights to Hugging Face safetensors (Llama/Mixtral
// names, config.json, tokenizer.json), streamed one output file at a time (lib/ckpt/hf_export.h).
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "ckpt/diff.h"
#include "ckpt/hf_export.h"
#include "data/progress.h"

namespace ms::ckpt_cmd {
namespace {

struct ExportArgs {
  std::string checkpoint;
  std::string format = "safetensors";
  std::string output;
  uint64_t max_shard_bytes = 5'000'000'000;
  bool replace = false;
};

Result<int> export_checkpoint(const ExportArgs& args) {
  io::Env& env = io::default_env();
  MS_ASSIGN_OR_RETURN(ckpt::OpenedCatalog opened, ckpt::open_tensor_catalog(args.checkpoint, env));
  if (!opened.is_checkpoint) {
    return InvalidArgument("'" + args.checkpoint + "' is not a checkpoint (export reads a step "
                           "directory, a checkpoints/ directory or a latest file)");
  }
  MS_ASSIGN_OR_RETURN(config::ModelConfig model,
                      ckpt::checkpoint_model_config(opened.manifest->config_yaml, opened.resolved));
  ckpt::HfExportOptions options;
  options.output_dir = args.output;
  options.output_rules = {{args.checkpoint, opened.resolved}, "--output", args.replace};
  options.max_shard_bytes = args.max_shard_bytes;
  const std::string tokenizer = opened.resolved + "/tokenizer.json";
  std::error_code ec;
  if (std::filesystem::exists(tokenizer, ec)) options.tokenizer_json = tokenizer;
  data::Progress progress("export " + args.output, 0);
  options.progress = [&](uint64_t done, uint64_t) { progress.update(done); };
  MS_ASSIGN_OR_RETURN(ckpt::HfExportSummary summary,
                      ckpt::export_hf(model, opened.catalog, options));
  progress.finish();
  std::printf("exported step %lld of %s: %zu tensors, %llu bytes in %zu file(s) to %s%s\n",
              static_cast<long long>(opened.manifest->step), opened.resolved.c_str(),
              summary.tensors, static_cast<unsigned long long>(summary.tensor_bytes),
              summary.files.size(), args.output.c_str(),
              options.tokenizer_json.empty() ? " (no tokenizer.json in the checkpoint)" : "");
  return 0;
}

// Under mpirun rank 0 writes the export (one output directory) and the other ranks wait for
// its outcome at the end of the job.
Result<int> run_export(const ExportArgs& args) {
  return cli::run_in_world([&](comm::MpiCommunicator& world) -> Result<int> {
    return world.rank() == 0 ? export_checkpoint(args) : Result<int>(0);
  });
}

void add_export_command(cli::Tool& tool) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* sub = tool.add_subcommand(
      "export", "Export a checkpoint's model to Hugging Face safetensors with config.json",
      [args] { return run_export(*args); });
  sub->add_option("checkpoint", args->checkpoint,
                  "Step directory, checkpoints/ directory or latest file")->required();
  sub->add_option("--format", args->format, "Output format (only: safetensors)")
      ->check(CLI::IsMember({"safetensors"}))->capture_default_str();
  sub->add_option("--output,-o", args->output,
                  "Output directory: absent or empty (see --replace), outside the checkpoint; "
                  "built under a temporary name and renamed into place")
      ->required();
  sub->add_flag("--replace", args->replace,
                "Replace an existing --output directory (removed once the new one is complete)");
  sub->add_option("--max-shard-bytes", args->max_shard_bytes,
                  "Split into model-0000X-of-0000N.safetensors files of at most this many bytes")
      ->check(cli::kPositiveNumber)
      ->capture_default_str();
}

}  // namespace

MS_CLI_COMMAND(export, add_export_command);

}  // namespace ms::ckpt_cmd
