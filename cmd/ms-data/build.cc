// `ms-data build`: tokenize corpus files into a Megatron indexed dataset with a .meta.json
// sidecar. Runs alone or under mpirun (ranks share the tokenizing, rank 0 writes); the logic is
// in lib/data/dataset_builder.
#include "cmd/common/mpi_world.h"
#include "cmd/common/registry.h"

#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "comm/agree.h"
#include "comm/mpi_communicator.h"
#include "core/thread_pool.h"
#include "data/dataset_builder.h"
#include "data/tokenizer.h"

namespace ms::data_cmd {
namespace {

struct BuildArgs {
  data::BuildOptions options;
  std::string text_split = "none";
  std::string dtype = "auto";
  bool no_progress = false;
  bool json = false;
};

void print_summary(const data::BuildResult& r, const std::string& prefix, bool json) {
  const double tokens_per_s = r.seconds > 0 ? static_cast<double>(r.meta.tokens) / r.seconds : 0;
  const double mb_per_s = r.seconds > 0 ? static_cast<double>(r.text_bytes) / 1e6 / r.seconds : 0;
  if (json) {
    nlohmann::ordered_json doc;
    doc["prefix"] = prefix;
    doc["documents"] = r.meta.documents;
    doc["tokens"] = r.meta.tokens;
    doc["dtype"] = r.meta.dtype;
    doc["text_bytes"] = r.text_bytes;
    doc["seconds"] = r.seconds;
    doc["tokens_per_s"] = tokens_per_s;
    doc["mb_per_s"] = mb_per_s;
    std::cout << doc.dump(2) << std::endl;
    return;
  }
  std::printf("wrote %s.{bin,idx,meta.json}: %llu documents, %llu tokens (%s) from %zu source(s), "
              "%.2f MB of text in %.2f s: %.0f tokens/s, %.2f MB/s\n",
              prefix.c_str(), static_cast<unsigned long long>(r.meta.documents),
              static_cast<unsigned long long>(r.meta.tokens), r.meta.dtype.c_str(),
              r.meta.sources.size(), static_cast<double>(r.text_bytes) / 1e6, r.seconds,
              tokens_per_s, mb_per_s);
}

Result<int> run_build(BuildArgs& args) {
  MS_ASSIGN_OR_RETURN(args.options.corpus.text_split, data::parse_text_split(args.text_split));
  MS_ASSIGN_OR_RETURN(args.options.dtype, data::parse_dtype_choice(args.dtype));
  args.options.show_progress = !args.no_progress;
  return cli::run_in_world([&](comm::MpiCommunicator& world) -> Result<int> {
    Result<std::unique_ptr<data::Tokenizer>> tokenizer =
        data::Tokenizer::load(args.options.tokenizer_path);
    MS_RETURN_IF_ERROR(comm::agree(world, tokenizer.status(), "loading the tokenizer"));
    comm::Communicator* comm = world.size() > 1 ? &world : nullptr;
    MS_ASSIGN_OR_RETURN(data::BuildResult result,
                        data::build_dataset(io::default_env(), **tokenizer, args.options, comm));
    if (world.rank() == 0) print_summary(result, args.options.output_prefix, args.json);
    return 0;
  });
}

void add_build_command(cli::Tool& tool) {
  auto args = std::make_shared<BuildArgs>();
  args->options.threads = ThreadPool::default_size();
  CLI::App* sub = tool.add_subcommand(
      "build", "Tokenize .txt/.jsonl/.jsonl.zst files into a Megatron indexed dataset (.bin/.idx) with a .meta.json sidecar",
      [args] { return run_build(*args); });
  sub->add_option("--input,-i", args->options.inputs, "Corpus files, directories (recursive) or glob patterns, in order")
      ->required();
  sub->add_option("--tokenizer,-t", args->options.tokenizer_path, "tokenizer.json or .tiktoken file")->required();
  sub->add_option("--output,-o", args->options.output_prefix,
                  "Output prefix: writes <prefix>.bin, .idx, .meta.json (its directory is created)")
      ->required();
  sub->add_option("--threads", args->options.threads, "Tokenizer threads per rank (default: all cores)")
      ->check(CLI::Range(1, 1024));
  sub->add_option("--text-key", args->options.corpus.text_key, "JSON field holding the document text")
      ->capture_default_str();
  sub->add_option("--doc-separator", args->text_split,
                  "How .txt files split into documents: none (whole file), blank-line, line")
      ->check(CLI::IsMember({"none", "blank-line", "line"}))->capture_default_str();
  sub->add_flag("--append-eos,!--no-append-eos", args->options.append_eos,
                "Append the tokenizer's end-of-document id to every document (default on)");
  sub->add_option("--dtype", args->dtype, "Token dtype: auto (u16 when the vocabulary fits), u16, i32")
      ->check(CLI::IsMember({"auto", "u16", "i32"}))->capture_default_str();
  sub->add_flag("--skip-bad-lines", args->options.corpus.skip_bad_lines,
                "Skip and count malformed JSON lines instead of failing");
  sub->add_option("--batch-docs", args->options.batch_documents, "Documents tokenized per batch")
      ->check(CLI::Range(1, 1 << 24))->capture_default_str();
  sub->add_flag("--no-progress", args->no_progress, "Do not print progress");
  sub->add_flag("--replace", args->options.replace,
                "Replace an existing dataset at --output (each file is replaced atomically)");
  cli::add_json_flag(sub, &args->json);
}

}  // namespace

MS_CLI_COMMAND(build, add_build_command);

}  // namespace ms::data_cmd
