// The one Tokenizer implementation behind every supported file format. Loaders
// (tokenizer_json.cc, tokenizer_tiktoken.cc) translate their format into a BpeTokenizerSpec;
// this class turns text into pieces (added tokens, normalization, regex or Metaspace split,
// invalid-UTF-8 rule), pieces into ids (bpe_model.h) and ids back into bytes.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/bpe_model.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"

namespace ms::data {

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = true;  // gated by encode's allow_special; non-special added tokens always match
  bool lstrip = false;  // the match swallows whitespace on its left
  bool rstrip = false;  // ... and on its right
};

enum class PrependScheme { kNever, kFirst, kAlways };

struct BpeTokenizerSpec {
  std::string kind;  // "byte-level-bpe", "tiktoken" or "byte-fallback-bpe"
  // Byte-level: vocabulary entries are raw bytes, every byte has a token, text is regex-split.
  // Otherwise (byte-fallback): entries are UTF-8 text with U+2581 for spaces.
  bool byte_level = true;
  std::vector<std::pair<std::string, int32_t>> vocab;  // token bytes/text -> id
  struct Merge {
    int32_t left, right, merged, rank;  // lower rank merges first; equal ranks: leftmost first
  };
  std::vector<Merge> merges;
  // A piece found whole in the vocabulary is emitted as that token without merging
  // (tiktoken, Llama-3's "ignore_merges").
  bool ignore_merges = false;
  std::vector<std::shared_ptr<const SplitRegex>> splits;  // applied one after another
  bool add_prefix_space = false;  // byte-level: prepend " " to text not starting with one
  // Byte-fallback: spaces become U+2581; the prefix rule; split before each U+2581.
  bool metaspace = false;
  PrependScheme prepend = PrependScheme::kNever;
  bool prepend_even_if_present = false;  // Prepend normalizer (legacy Llama-2) vs Metaspace
  bool metaspace_split = false;
  bool byte_fallback = false;
  std::optional<int32_t> unk_id;
  std::vector<AddedToken> added;
};

// The largest id a tokenizer with `entries` vocabulary and added-token entries may use. Ids
// index dense tables, so an id a file claims must stay near the file's real entry count: holes
// and specials placed past the vocabulary are fine (2 x entries + 2^18 leaves room for every
// published tokenizer, a few MB of tables), a 2^31 id is refused instead of allocating 68 GB.
int64_t max_token_id_for(size_t entries);

class BpeTokenizer final : public Tokenizer {
 public:
  // Validates the spec (ids unique and non-negative, merged ids in range, byte-level alphabet
  // complete); InvalidArgument naming `source` and the problem.
  static Result<std::unique_ptr<BpeTokenizer>> create(BpeTokenizerSpec spec,
                                                      const std::string& source);

  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const override;
  Result<std::string> decode(std::span<const int32_t> ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  int32_t eos_id() const override { return eos_id_; }
  // Computed on first use (thread-safe): hashing the whole vocabulary and merge table costs a
  // command that only encodes a few milliseconds for nothing.
  const std::string& content_hash() const override;
  std::string kind() const override { return spec_.kind; }

  // The bytes (byte-level) or text (byte-fallback) a regular token stands for.
  const std::string& token_bytes(int32_t id) const { return id_to_token_[id]; }

 private:
  explicit BpeTokenizer(BpeTokenizerSpec spec);
  Status index(const std::string& source);
  // The id of a vocabulary token (bytes for byte-level BPE, text otherwise), or -1.
  int32_t vocab_id(std::string_view token) const;
  Status index_bytes(const std::string& source);
  void index_added();
  std::string compute_hash() const;
  void encode_segment(std::string_view segment, bool at_start, std::vector<int32_t>& out) const;
  void encode_byte_level(std::string_view segment, std::vector<int32_t>& out) const;
  void encode_metaspace(std::string_view segment, bool at_start, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void append_decoded(int32_t id, bool first, std::string& out) const;
  // Position and length of the leftmost (then longest) added token in text[from..), or npos.
  std::pair<size_t, size_t> find_added(std::string_view text, size_t from, bool allow_special,
                                       const AddedToken** token) const;

  BpeTokenizerSpec spec_;
  BpeMerges merges_;
  PieceCache cache_;
  StringIndex vocab_index_;  // vocabulary bytes/text -> its index in spec_.vocab
  std::vector<std::string> id_to_token_;                  // id -> bytes/text ("" for holes)
  std::vector<int8_t> is_added_;                          // id -> 1 when an added token
  StringMap<int32_t> added_by_content_;
  std::vector<std::vector<size_t>> added_by_first_byte_;  // byte -> spec_.added, longest first
  std::vector<int32_t> byte_ids_;                          // byte -> id (byte-level / fallback)
  int32_t eos_id_ = -1;
  mutable std::once_flag hash_once_;
  mutable std::string hash_;
};

// "<0x0A>" -> 10 (the byte-fallback token spelling); nullopt for anything else.
std::optional<uint8_t> parse_byte_token(std::string_view token);

}  // namespace ms::data
