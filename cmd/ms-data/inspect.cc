// `ms-data inspect <prefix>`: what a token dataset holds (counts, dtype, document length
// histogram, tokenizer and sources from the sidecar), as a table or --json; with --entropy also
// the unigram entropy of its tokens (a pass over the .bin), the loss a model ignoring context
// would reach.
#include "cmd/common/registry.h"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>

#include "data/indexed_dataset.h"
#include "data/indexed_dataset_stats.h"

namespace ms::data_cmd {
namespace {

using nlohmann::ordered_json;

ordered_json stats_json(const data::IndexedDataset& ds, const data::DatasetStats& s) {
  ordered_json doc;
  doc["prefix"] = ds.prefix();
  doc["documents"] = s.documents;
  doc["sequences"] = s.sequences;
  doc["tokens"] = s.tokens;
  doc["dtype"] = data::dtype_code_name(ds.dtype_code());
  doc["idx_bytes"] = ds.idx_size();
  doc["bin_bytes"] = ds.bin_size();
  doc["content_hash"] = ds.content_hash();
  doc["document_tokens"] = {{"min", s.min_document_tokens}, {"mean", s.mean_document_tokens},
                            {"max", s.max_document_tokens}};
  ordered_json histogram = ordered_json::array();
  for (const data::LengthBucket& b : s.histogram) {
    histogram.push_back({{"lo", b.lo}, {"hi", b.hi}, {"documents", b.count}});
  }
  doc["histogram"] = histogram;
  if (ds.meta()) doc["meta"] = ordered_json::parse(data::dataset_meta_to_json(*ds.meta()));
  return doc;
}

void print_meta(const data::DatasetMeta& m) {
  std::printf("tokenizer   %s (%s, vocab %lld, eos %lld, hash %.16s)\n", m.tokenizer_path.c_str(),
              m.tokenizer_kind.c_str(), static_cast<long long>(m.vocab_size),
              static_cast<long long>(m.eos_id), m.tokenizer_hash.c_str());
  std::printf("built by    ms-data %s%s\n", m.toolkit_version.c_str(),
              m.append_eos ? ", end-of-document id appended" : "");
  for (const data::DatasetSource& src : m.sources) {
    std::printf("source      %s: %llu documents, %llu tokens, %llu bytes%s\n", src.path.c_str(),
                static_cast<unsigned long long>(src.documents), static_cast<unsigned long long>(src.tokens),
                static_cast<unsigned long long>(src.bytes),
                src.skipped_lines ? (", " + std::to_string(src.skipped_lines) + " bad lines skipped").c_str() : "");
  }
}

void print_table(const data::IndexedDataset& ds, const data::DatasetStats& s) {
  std::printf("# ms-data inspect %s\n", ds.prefix().c_str());
  std::printf("documents   %llu\nsequences   %llu\ntokens      %llu\n",
              static_cast<unsigned long long>(s.documents), static_cast<unsigned long long>(s.sequences),
              static_cast<unsigned long long>(s.tokens));
  std::printf("dtype       %s\nfiles       .idx %llu bytes, .bin %llu bytes, hash %s\n",
              data::dtype_code_name(ds.dtype_code()).c_str(), static_cast<unsigned long long>(ds.idx_size()),
              static_cast<unsigned long long>(ds.bin_size()), ds.content_hash().c_str());
  std::printf("doc tokens  min %llu, mean %.1f, max %llu\n",
              static_cast<unsigned long long>(s.min_document_tokens), s.mean_document_tokens,
              static_cast<unsigned long long>(s.max_document_tokens));
  if (ds.meta()) print_meta(*ds.meta());
  std::printf("# document length histogram (tokens)\n%21s %12s\n", "tokens", "documents");
  for (const data::LengthBucket& b : s.histogram) {
    std::printf("%10llu..%-9llu %12llu\n", static_cast<unsigned long long>(b.lo),
                static_cast<unsigned long long>(b.hi), static_cast<unsigned long long>(b.count));
  }
}

void print_unigram(const data::UnigramStats& u) {
  std::printf("unigram     entropy %.4f nats/token (%.4f bits), %llu distinct ids\n", u.entropy_nats,
              u.entropy_nats / std::log(2.0), static_cast<unsigned long long>(u.distinct_ids));
}

Result<int> run_inspect(const std::string& prefix, bool json, bool entropy) {
  MS_ASSIGN_OR_RETURN(data::IndexedDataset ds, data::IndexedDataset::open(prefix));
  const data::DatasetStats stats = data::compute_dataset_stats(ds);
  std::optional<data::UnigramStats> unigram;
  if (entropy) unigram = data::compute_unigram_stats(ds);
  if (json) {
    ordered_json doc = stats_json(ds, stats);
    if (unigram) {
      doc["unigram"] = {{"entropy_nats", unigram->entropy_nats},
                        {"entropy_bits", unigram->entropy_nats / std::log(2.0)},
                        {"distinct_ids", unigram->distinct_ids}};
    }
    std::cout << doc.dump(2) << std::endl;
  } else {
    print_table(ds, stats);
    if (unigram) print_unigram(*unigram);
  }
  return 0;
}

void add_inspect_command(cli::Tool& tool) {
  auto prefix = std::make_shared<std::string>();
  auto json = std::make_shared<bool>(false);
  auto entropy = std::make_shared<bool>(false);
  CLI::App* sub = tool.add_subcommand(
      "inspect", "Show a token dataset's counts, dtype, document length histogram and tokenizer",
      [prefix, json, entropy] { return run_inspect(*prefix, *json, *entropy); });
  sub->add_option("prefix", *prefix, "Dataset prefix (<prefix>.idx and <prefix>.bin)")->required();
  sub->add_flag("--entropy", *entropy,
                "Also read every token and print the unigram entropy (nats and bits per token)");
  cli::add_json_flag(sub, json.get());
}

}  // namespace

MS_CLI_COMMAND(inspect, add_inspect_command);

}  // namespace ms::data_cmd
