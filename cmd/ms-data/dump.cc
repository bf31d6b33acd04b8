// `ms-data dump <prefix> --docs A:B`: documents of a token dataset as decoded text or as token-id
// JSON lines, for looking at what a build produced. Text needs a tokenizer: --tokenizer or the
// one the sidecar names (its hash must match).
#include "cmd/common/registry.h"

#include <charconv>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace ms::data_cmd {
namespace {

struct DumpArgs {
  std::string prefix;
  std::string docs = "0:5";
  std::string format = "text";
  std::string tokenizer_path;
};

Result<uint64_t> parse_count(std::string_view text, uint64_t fallback) {
  if (text.empty()) return fallback;
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return InvalidArgument("--docs: '" + std::string(text) + "' is not a document number");
  }
  return value;
}

// "A:B" (half-open), "A:" (to the end), ":B", or "A" (one document), clipped to `documents`.
Result<std::pair<uint64_t, uint64_t>> parse_range(const std::string& text, uint64_t documents) {
  const size_t colon = text.find(':');
  std::pair<uint64_t, uint64_t> range;
  if (colon == std::string::npos) {
    MS_ASSIGN_OR_RETURN(range.first, parse_count(text, 0));
    range.second = range.first + 1;
  } else {
    MS_ASSIGN_OR_RETURN(range.first, parse_count(std::string_view(text).substr(0, colon), 0));
    MS_ASSIGN_OR_RETURN(range.second, parse_count(std::string_view(text).substr(colon + 1), documents));
  }
  range.second = std::min(range.second, documents);
  if (range.first >= range.second) {
    return InvalidArgument("--docs " + text + " selects no document (the dataset has " +
                           std::to_string(documents) + ")");
  }
  return range;
}

std::vector<int32_t> document_tokens(const data::IndexedDataset& ds, uint64_t doc) {
  std::vector<int32_t> tokens;
  std::span<const int64_t> index = ds.document_index();
  for (int64_t s = index[doc]; s < index[doc + 1]; ++s) {
    const size_t seq = static_cast<size_t>(s);
    const size_t offset = tokens.size();
    tokens.resize(offset + static_cast<size_t>(ds.sequence_length(seq)));
    ds.read_tokens(seq, 0, tokens.size() - offset, tokens.data() + offset);
  }
  return tokens;
}

Result<std::unique_ptr<data::Tokenizer>> load_tokenizer(const data::IndexedDataset& ds,
                                                        const std::string& given) {
  std::string path = given;
  if (path.empty()) {
    if (!ds.meta() || ds.meta()->tokenizer_path.empty()) {
      return InvalidArgument(ds.prefix() + " has no sidecar naming its tokenizer; pass --tokenizer or --format ids");
    }
    path = ds.meta()->tokenizer_path;
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tok, data::Tokenizer::load(path));
  if (ds.meta() && !ds.meta()->tokenizer_hash.empty() && ds.meta()->tokenizer_hash != tok->content_hash()) {
    return InvalidArgument("tokenizer '" + path + "' is not the one " + ds.prefix() +
                           " was built with (hash differs from its .meta.json)");
  }
  return tok;
}

Result<int> run_dump(const DumpArgs& args) {
  MS_ASSIGN_OR_RETURN(data::IndexedDataset ds, data::IndexedDataset::open(args.prefix));
  MS_ASSIGN_OR_RETURN(auto range, parse_range(args.docs, ds.num_documents()));
  std::unique_ptr<data::Tokenizer> tok;
  if (args.format == "text") {
    MS_ASSIGN_OR_RETURN(tok, load_tokenizer(ds, args.tokenizer_path));
  }
  for (uint64_t d = range.first; d < range.second; ++d) {
    const std::vector<int32_t> tokens = document_tokens(ds, d);
    if (!tok) {
      nlohmann::ordered_json line;
      line["document"] = d;
      line["ids"] = tokens;
      std::cout << line.dump() << "\n";
      continue;
    }
    MS_ASSIGN_OR_RETURN(std::string text, tok->decode(tokens));
    std::cout << "=== document " << d << " (" << tokens.size() << " tokens) ===\n" << text << "\n";
  }
  std::cout.flush();
  return 0;
}

void add_dump_command(cli::Tool& tool) {
  auto args = std::make_shared<DumpArgs>();
  CLI::App* sub = tool.add_subcommand(
      "dump", "Print documents of a token dataset as text or as token-id JSON lines",
      [args] { return run_dump(*args); });
  sub->add_option("prefix", args->prefix, "Dataset prefix (<prefix>.idx and <prefix>.bin)")->required();
  sub->add_option("--docs", args->docs, "Documents A:B (half-open), A:, :B or A")->capture_default_str();
  sub->add_option("--format", args->format, "text (decoded) or ids (JSON lines)")
      ->check(CLI::IsMember({"text", "ids"}))->capture_default_str();
  sub->add_option("--tokenizer,-t", args->tokenizer_path, "Tokenizer for --format text (default: the sidecar's)");
}

}  // namespace

MS_CLI_COMMAND(dump, add_dump_command);

}  // namespace ms::data_cmd
