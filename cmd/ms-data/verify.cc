// `ms-data verify <prefix>`: every check a dataset can pass (the index validation of open(),
// .bin size, token ids below the vocabulary, tokenizer hash). Exit 0 with a one-line summary, or
// exit 1 naming the first problem.
#include "cmd/common/registry.h"

#include <cstdio>
#include <memory>

#include "data/indexed_dataset.h"
#include "data/indexed_dataset_stats.h"
#include "data/tokenizer.h"

namespace ms::data_cmd {
namespace {

struct VerifyArgs {
  std::string prefix;
  std::string tokenizer_path;
  int64_t vocab_size = 0;
};

Result<int> run_verify(const VerifyArgs& args) {
  MS_ASSIGN_OR_RETURN(data::IndexedDataset ds, data::IndexedDataset::open(args.prefix));
  data::VerifyOptions options;
  options.vocab_size = args.vocab_size;
  if (!args.tokenizer_path.empty()) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tok, data::Tokenizer::load(args.tokenizer_path));
    if (options.vocab_size == 0) options.vocab_size = tok->vocab_size();
    options.tokenizer_hash = tok->content_hash();
  }
  MS_ASSIGN_OR_RETURN(data::VerifyReport report, data::verify_dataset(ds, options));
  std::printf("OK %s: %zu documents, %zu sequences, %llu tokens (%s)", args.prefix.c_str(),
              ds.num_documents(), ds.num_sequences(),
              static_cast<unsigned long long>(ds.total_tokens()),
              data::dtype_code_name(ds.dtype_code()).c_str());
  if (report.vocab_size > 0) {
    std::printf(", every id below vocab %lld\n", static_cast<long long>(report.vocab_size));
  } else {
    std::printf("; token ids NOT checked: no sidecar, pass --tokenizer or --vocab-size\n");
  }
  return 0;
}

void add_verify_command(cli::Tool& tool) {
  auto args = std::make_shared<VerifyArgs>();
  CLI::App* sub = tool.add_subcommand(
      "verify", "Check a token dataset: index vs .bin sizes, monotonic pointers, ids below the vocabulary",
      [args] { return run_verify(*args); });
  sub->add_option("prefix", args->prefix, "Dataset prefix (<prefix>.idx and <prefix>.bin)")->required();
  sub->add_option("--tokenizer,-t", args->tokenizer_path,
                  "Check ids against this tokenizer's vocabulary and its hash against the sidecar");
  sub->add_option("--vocab-size", args->vocab_size, "Check ids against this vocabulary size")
      ->check(cli::kPositiveNumber);
}

}  // namespace

MS_CLI_COMMAND(verify, add_verify_command);

}  // namespace ms::data_cmd
