// BpeTokenizer: text -> pieces -> ids and back (see tokenizer_bpe.h and docs/tokenizer.md).
#include "data/tokenizer_bpe.h"

#include <algorithm>
#include <cstdio>

#include "data/tokenizer_sha256.h"
#include "data/unicode_utf8.h"

namespace ms::data {
namespace {

constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 LOWER ONE EIGHTH BLOCK

// Candidate end-of-document tokens in order of preference (docs/tokenizer.md, "eos rule").
constexpr std::string_view kEosNames[] = {"<|endoftext|>", "<|end_of_text|>", "</s>",
                                          "<eos>",         "<|eot_id|>",      "<|im_end|>"};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string byte_token_name(int b) {
  char name[8];
  std::snprintf(name, sizeof(name), "<0x%02X>", b);
  return name;
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

std::optional<uint8_t> parse_byte_token(std::string_view token) {
  if (token.size() != 6 || token.substr(0, 3) != "<0x" || token[5] != '>') return std::nullopt;
  unsigned value = 0;
  for (char c : token.substr(3, 2)) {
    value <<= 4;
    if (c >= '0' && c <= '9') value |= static_cast<unsigned>(c - '0');
    else if (c >= 'A' && c <= 'F') value |= static_cast<unsigned>(c - 'A' + 10);
    else return std::nullopt;
  }
  return static_cast<uint8_t>(value);
}

int64_t max_token_id_for(size_t entries) {
  return 2 * static_cast<int64_t>(entries) + (int64_t{1} << 18) - 1;
}

BpeTokenizer::BpeTokenizer(BpeTokenizerSpec spec) : spec_(std::move(spec)) {}

Result<std::unique_ptr<BpeTokenizer>> BpeTokenizer::create(BpeTokenizerSpec spec,
                                                           const std::string& source) {
  std::unique_ptr<BpeTokenizer> tokenizer(new BpeTokenizer(std::move(spec)));
  MS_RETURN_IF_ERROR(tokenizer->index(source));
  return tokenizer;
}

Status BpeTokenizer::index(const std::string& source) {
  int32_t max_id = -1;
  for (const auto& [token, id] : spec_.vocab) max_id = std::max(max_id, id);
  for (const AddedToken& t : spec_.added) max_id = std::max(max_id, t.id);
  if (max_id < 0) return InvalidArgument(source + ": the vocabulary is empty");
  const int64_t limit = max_token_id_for(spec_.vocab.size() + spec_.added.size());
  if (max_id > limit) {
    return InvalidArgument(source + ": token id " + std::to_string(max_id) + " is beyond the " +
                           std::to_string(limit) + " a tokenizer of " +
                           std::to_string(spec_.vocab.size() + spec_.added.size()) +
                           " entries may use (2 x entries + 2^18)");
  }
  id_to_token_.assign(static_cast<size_t>(max_id) + 1, std::string());
  is_added_.assign(id_to_token_.size(), 0);
  std::vector<int8_t> seen(id_to_token_.size(), 0);
  for (const auto& [token, id] : spec_.vocab) {
    if (id < 0) return InvalidArgument(source + ": token '" + token + "' has negative id " + std::to_string(id));
    if (seen[id]) return InvalidArgument(source + ": id " + std::to_string(id) + " is given to two tokens");
    seen[id] = 1;
    id_to_token_[id] = token;
  }
  vocab_index_.reserve(spec_.vocab.size());
  const auto key_of = [this](int32_t i) { return std::string_view(spec_.vocab[i].first); };
  for (size_t i = 0; i < spec_.vocab.size(); ++i) {
    vocab_index_.insert(spec_.vocab[i].first, static_cast<int32_t>(i), key_of);
  }
  for (const AddedToken& t : spec_.added) {
    if (t.id < 0) return InvalidArgument(source + ": added token '" + t.content + "' has a negative id");
    if (t.content.empty()) return InvalidArgument(source + ": added token " + std::to_string(t.id) + " is empty");
    id_to_token_[t.id] = t.content;
    is_added_[t.id] = 1;
    added_by_content_.emplace(t.content, t.id);
  }
  merges_.reserve(spec_.merges.size());
  for (const auto& m : spec_.merges) {
    if (m.merged < 0 || m.merged > max_id) {
      return InvalidArgument(source + ": a merge produces id " + std::to_string(m.merged) + ", outside the vocabulary");
    }
    merges_.add(m.left, m.right, m.merged, m.rank);
  }
  MS_RETURN_IF_ERROR(index_bytes(source));
  index_added();
  for (std::string_view name : kEosNames) {
    auto it = added_by_content_.find(name);
    if (it != added_by_content_.end()) {
      eos_id_ = it->second;
      break;
    }
  }
  return Status::OK();
}

Status BpeTokenizer::index_bytes(const std::string& source) {
  byte_ids_.assign(256, -1);
  if (!spec_.byte_level && !spec_.byte_fallback) {
    if (!spec_.unk_id) return InvalidArgument(source + ": a BPE without byte_fallback needs an unk_token");
    return Status::OK();
  }
  for (int b = 0; b < 256; ++b) {
    const std::string name = spec_.byte_level ? std::string(1, static_cast<char>(b)) : byte_token_name(b);
    const int32_t id = vocab_id(name);
    if (id < 0) {
      return InvalidArgument(source + ": the vocabulary has no token for byte " + byte_token_name(b) +
                             (spec_.byte_level ? " (a byte-level BPE needs all 256)"
                                               : " (byte_fallback needs all 256 <0xNN> tokens)"));
    }
    byte_ids_[b] = id;
  }
  return Status::OK();
}

void BpeTokenizer::index_added() {
  added_by_first_byte_.assign(256, {});
  for (size_t i = 0; i < spec_.added.size(); ++i) {
    added_by_first_byte_[static_cast<uint8_t>(spec_.added[i].content[0])].push_back(i);
  }
  for (auto& candidates : added_by_first_byte_) {
    std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
      return spec_.added[a].content.size() > spec_.added[b].content.size();
    });
  }
}

const std::string& BpeTokenizer::content_hash() const {
  std::call_once(hash_once_, [this] { hash_ = compute_hash(); });
  return hash_;
}

std::string BpeTokenizer::compute_hash() const {
  Sha256 sha;
  sha.update_field("ms-tokenizer-hash-v1");
  sha.update_field(spec_.kind);
  const std::string flags = std::to_string(spec_.byte_level) + std::to_string(spec_.ignore_merges) +
                            std::to_string(spec_.add_prefix_space) + std::to_string(spec_.metaspace) +
                            std::to_string(static_cast<int>(spec_.prepend)) +
                            std::to_string(spec_.prepend_even_if_present) +
                            std::to_string(spec_.metaspace_split) + std::to_string(spec_.byte_fallback) +
                            std::to_string(spec_.unk_id.value_or(-1));
  sha.update_field(flags);
  for (const auto& split : spec_.splits) sha.update_field(split->pattern());
  sha.update_field("vocab");
  for (size_t id = 0; id < id_to_token_.size(); ++id) {
    if (!is_added_[id]) sha.update_field(id_to_token_[id]);
  }
  sha.update_field("merges");
  for (const auto& m : spec_.merges) {
    sha.update_field(std::to_string(m.left) + " " + std::to_string(m.right) + " " + std::to_string(m.merged) +
                     " " + std::to_string(m.rank));
  }
  sha.update_field("added");
  for (const AddedToken& t : spec_.added) {
    sha.update_field(std::to_string(t.id) + " " + std::to_string(t.special) + std::to_string(t.lstrip) +
                     std::to_string(t.rstrip));
    sha.update_field(t.content);
  }
  return sha.hex_digest();
}

std::pair<size_t, size_t> BpeTokenizer::find_added(std::string_view text, size_t from,
                                                   bool allow_special,
                                                   const AddedToken** token) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (size_t i : added_by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const AddedToken& candidate = spec_.added[i];
      if (candidate.special && !allow_special) continue;
      if (text.compare(pos, candidate.content.size(), candidate.content) == 0) {
        *token = &candidate;
        return {pos, candidate.content.size()};
      }
    }
  }
  *token = nullptr;
  return {std::string_view::npos, 0};
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t pos = 0;
  while (pos <= text.size()) {
    const AddedToken* token = nullptr;
    auto [at, length] = spec_.added.empty() ? std::pair<size_t, size_t>{std::string_view::npos, 0}
                                            : find_added(text, pos, allow_special, &token);
    size_t segment_end = token ? at : text.size();
    if (token && token->lstrip) {
      while (segment_end > pos && is_space(text[segment_end - 1])) --segment_end;
    }
    encode_segment(text.substr(pos, segment_end - pos), pos == 0, out);
    if (!token) break;
    out.push_back(token->id);
    pos = at + length;
    if (token->rstrip) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
    }
  }
  return out;
}

void BpeTokenizer::encode_segment(std::string_view segment, bool at_start,
                                  std::vector<int32_t>& out) const {
  if (segment.empty()) return;
  if (spec_.byte_level) {
    encode_byte_level(segment, out);
  } else {
    encode_metaspace(segment, at_start, out);
  }
}

void BpeTokenizer::encode_byte_level(std::string_view segment, std::vector<int32_t>& out) const {
  std::string prefixed;
  if (spec_.add_prefix_space && segment[0] != ' ') {
    prefixed = " " + std::string(segment);
    segment = prefixed;
  }
  // The first split runs in batches of kSplitBatch pieces, each split further and encoded
  // before the next: a whole run's pieces (16 bytes each, about one per 3 bytes of text) would
  // cost more memory than the text itself.
  constexpr size_t kSplitBatch = 4096;
  std::vector<std::string_view> pieces, next;
  for_each_utf8_run(
      segment,
      [&](std::string_view run) {
        if (spec_.splits.empty()) {
          encode_piece(run, out);
          return;
        }
        for (size_t from = 0; from < run.size();) {
          pieces.clear();
          from = spec_.splits.front()->split(run, from, pieces, kSplitBatch);
          for (size_t r = 1; r < spec_.splits.size(); ++r) {
            next.clear();
            for (std::string_view piece : pieces) spec_.splits[r]->split(piece, next);
            pieces.swap(next);
          }
          for (std::string_view piece : pieces) encode_piece(piece, out);
        }
      },
      [&](std::string_view invalid_byte) { out.push_back(byte_ids_[static_cast<uint8_t>(invalid_byte[0])]); });
}

void BpeTokenizer::encode_metaspace(std::string_view segment, bool at_start,
                                    std::vector<int32_t>& out) const {
  std::string text(segment);
  if (spec_.metaspace) {
    replace_all(text, " ", kMetaspace);
    const bool prepend = spec_.prepend == PrependScheme::kAlways ||
                         (spec_.prepend == PrependScheme::kFirst && at_start);
    if (prepend && (spec_.prepend_even_if_present || !text.starts_with(kMetaspace))) {
      text.insert(0, kMetaspace);
    }
  }
  if (!spec_.metaspace_split) {
    encode_piece(text, out);
    return;
  }
  size_t begin = 0;
  for (size_t at = text.find(kMetaspace, 1); at != std::string::npos; at = text.find(kMetaspace, at + 1)) {
    encode_piece(std::string_view(text).substr(begin, at - begin), out);
    begin = at;
  }
  encode_piece(std::string_view(text).substr(begin), out);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (spec_.ignore_merges) {
    if (const int32_t id = vocab_id(piece); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = piece.size() <= PieceCache::kMaxPieceBytes;
  if (cacheable && cache_.lookup(piece, out)) return;
  std::vector<int32_t> symbols;
  initial_symbols(piece, symbols);
  merges_.apply(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) cache_.insert(piece, symbols);
}

void BpeTokenizer::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.reserve(piece.size());
  if (spec_.byte_level) {
    for (char c : piece) symbols.push_back(byte_ids_[static_cast<uint8_t>(c)]);
    return;
  }
  size_t pos = 0;
  while (pos < piece.size()) {
    const size_t len = std::max<size_t>(1, utf8_char_length(piece, pos));
    if (const int32_t id = vocab_id(piece.substr(pos, len)); id >= 0) {
      symbols.push_back(id);
    } else if (spec_.byte_fallback) {
      for (size_t i = 0; i < len; ++i) symbols.push_back(byte_ids_[static_cast<uint8_t>(piece[pos + i])]);
    } else {
      symbols.push_back(*spec_.unk_id);
    }
    pos += len;
  }
}

Result<std::string> BpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_size() || (id_to_token_[id].empty() && !is_added_[id])) {
      return InvalidArgument("token id " + std::to_string(id) + " at position " + std::to_string(i) +
                             " is not in the vocabulary (" + std::to_string(vocab_size()) + " ids)");
    }
    append_decoded(id, i == 0, out);
  }
  return out;
}

void BpeTokenizer::append_decoded(int32_t id, bool first, std::string& out) const {
  const std::string& token = id_to_token_[id];
  if (is_added_[id] || spec_.byte_level) {
    out += token;
    return;
  }
  if (spec_.byte_fallback) {
    if (auto byte = parse_byte_token(token)) {
      out.push_back(static_cast<char>(*byte));
      return;
    }
  }
  std::string text = token;
  if (spec_.metaspace) {
    replace_all(text, kMetaspace, " ");
    if (first && spec_.prepend != PrependScheme::kNever && text.starts_with(' ')) text.erase(0, 1);
  }
  out += text;
}

std::optional<int32_t> BpeTokenizer::token_to_id(std::string_view token) const {
  if (auto it = added_by_content_.find(token); it != added_by_content_.end()) return it->second;
  if (spec_.byte_level) {
    std::optional<std::string> bytes = byte_level_to_bytes(token);
    if (!bytes) return std::nullopt;
    if (const int32_t id = vocab_id(*bytes); id >= 0) return id;
    return std::nullopt;
  }
  if (const int32_t id = vocab_id(token); id >= 0) return id;
  return std::nullopt;
}

int32_t BpeTokenizer::vocab_id(std::string_view token) const {
  const int32_t i = vocab_index_.find(token, [this](int32_t j) { return std::string_view(spec_.vocab[j].first); });
  return i == StringIndex::kAbsent ? -1 : spec_.vocab[i].second;
}

}  // namespace ms::data
