// tiktoken rank files -> BpeTokenizerSpec. A rank file lists each token's bytes (base64) and its
// rank, which is also its id; tiktoken merges the adjacent pair whose concatenation has the
// lowest rank. That is the same engine as Hugging Face BPE once every split of every token into
// two known tokens is declared a merge with the token's rank, which is what this loader does.
// The split pattern and special tokens are not in the file; they come from the named encoding.
#include <algorithm>
#include <charconv>

#include "data/tokenizer_formats.h"

namespace ms::data {
namespace {

struct NamedEncoding {
  std::string_view name;
  std::string_view pattern;  // a named_split_pattern()
  std::vector<std::pair<std::string, int32_t>> specials;
};

const std::vector<NamedEncoding>& named_encodings() {
  static const std::vector<NamedEncoding> encodings = {
      {"gpt2", "gpt2", {{"<|endoftext|>", 50256}}},
      {"r50k_base", "gpt2", {{"<|endoftext|>", 50256}}},
      {"p50k_base", "gpt2", {{"<|endoftext|>", 50256}}},
      {"cl100k_base",
       "cl100k_base",
       {{"<|endoftext|>", 100257},
        {"<|fim_prefix|>", 100258},
        {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260},
        {"<|endofprompt|>", 100276}}},
      {"o200k_base", "o200k_base", {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}},
  };
  return encodings;
}

int base64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

std::optional<std::string> base64_decode(std::string_view in) {
  if (in.empty() || in.size() % 4 != 0) return std::nullopt;
  for (int pad = 0; pad < 2 && in.back() == '='; ++pad) in.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = base64_value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (out.empty()) return std::nullopt;
  return out;
}

Status parse_rank_line(const std::string& path, size_t line_no, std::string_view line,
                       BpeTokenizerSpec& spec) {
  const std::string where = "tiktoken file '" + path + "' line " + std::to_string(line_no);
  const size_t space = line.find(' ');
  if (space == std::string_view::npos) return InvalidArgument(where + ": expected '<base64 token> <rank>'");
  std::optional<std::string> token = base64_decode(line.substr(0, space));
  if (!token) return InvalidArgument(where + ": '" + std::string(line.substr(0, space)) + "' is not base64");
  std::string_view rank_text = line.substr(space + 1);
  int32_t rank = -1;
  auto [end, ec] = std::from_chars(rank_text.data(), rank_text.data() + rank_text.size(), rank);
  if (ec != std::errc() || end != rank_text.data() + rank_text.size() || rank < 0) {
    return InvalidArgument(where + ": rank '" + std::string(rank_text) + "' is not a non-negative integer");
  }
  spec.vocab.emplace_back(std::move(*token), rank);
  return Status::OK();
}

// Every split of a token into two tokens merges into it at the token's rank.
void derive_merges(BpeTokenizerSpec& spec) {
  // The same flat index over the vocabulary's own strings as the tokenizer's (a rank file of
  // 200k tokens makes millions of lookups here); a repeated token keeps its first rank.
  const auto key_of = [&spec](int32_t i) { return std::string_view(spec.vocab[i].first); };
  StringIndex index;
  index.reserve(spec.vocab.size());
  for (size_t i = 0; i < spec.vocab.size(); ++i) {
    index.insert(spec.vocab[i].first, static_cast<int32_t>(i), key_of);
  }
  for (const auto& [token, id] : spec.vocab) {
    for (size_t cut = 1; cut < token.size(); ++cut) {
      const int32_t left = index.find(std::string_view(token).substr(0, cut), key_of);
      const int32_t right = index.find(std::string_view(token).substr(cut), key_of);
      if (left != StringIndex::kAbsent && right != StringIndex::kAbsent) {
        spec.merges.push_back({spec.vocab[left].second, spec.vocab[right].second, id, id});
      }
    }
  }
}

}  // namespace

std::string tiktoken_encoding_from_path(const std::string& path) {
  const std::string file = path.substr(path.find_last_of('/') + 1);
  for (const NamedEncoding& e : named_encodings()) {
    if (e.name != "gpt2" && file.find(e.name) != std::string::npos) return std::string(e.name);
  }
  return "gpt2";
}

Result<std::unique_ptr<BpeTokenizer>> load_tiktoken(const std::string& path, std::string_view text,
                                                    const std::string& encoding) {
  auto named = std::find_if(named_encodings().begin(), named_encodings().end(),
                            [&](const NamedEncoding& e) { return e.name == encoding; });
  if (named == named_encodings().end()) {
    return InvalidArgument("tiktoken encoding '" + encoding + "' for '" + path +
                           "' is unknown (known: gpt2, r50k_base, p50k_base, cl100k_base, o200k_base)");
  }
  BpeTokenizerSpec spec;
  spec.kind = "tiktoken";
  spec.byte_level = true;
  spec.ignore_merges = true;
  size_t line_no = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = text.find('\n', begin);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(begin, end - begin);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!line.empty()) MS_RETURN_IF_ERROR(parse_rank_line(path, line_no, line, spec));
    begin = end + 1;
  }
  if (spec.vocab.empty()) return InvalidArgument("tiktoken file '" + path + "' holds no tokens");
  derive_merges(spec);
  MS_ASSIGN_OR_RETURN(auto regex, SplitRegex::compile(*named_split_pattern(named->pattern)));
  spec.splits.push_back(std::move(regex));
  for (const auto& [content, id] : named->specials) spec.added.push_back({content, id, true, false, false});
  return BpeTokenizer::create(std::move(spec), "tiktoken file '" + path + "'");
}

}  // namespace ms::data
