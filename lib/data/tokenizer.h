// Tokenizers for ms-data: text -> token ids and back, for the three families the toolkit meets.
//   byte-level BPE   Hugging Face tokenizer.json of GPT-2 / Llama-3 style (byte-to-unicode
//                    alphabet, regex pre-split, ranked merges, added/special tokens);
//   tiktoken         OpenAI rank files (`<base64 token> <rank>` per line) with a named split
//                    pattern and that encoding's special tokens;
//   byte-fallback BPE  tokenizer.json of Llama-2 / Mistral style (Metaspace "▁" for spaces,
//                    <0xNN> tokens for characters outside the vocabulary).
// Every family runs on one shared merge engine (bpe_model.h), so encodings agree with the
// reference implementations token for token (tests/golden/tokenizer/). A Tokenizer is immutable
// after load and safe to use from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::data {

struct TokenizerLoadOptions {
  // For .tiktoken files: the named encoding whose split pattern and special tokens apply
  // ("gpt2" = "r50k_base", "p50k_base", "cl100k_base", "o200k_base"). Empty: taken from the
  // file name when it contains one of those names, else "gpt2".
  std::string tiktoken_encoding;
};

class Tokenizer {
 public:
  // Loads a Hugging Face tokenizer.json (byte-level BPE, or byte-fallback BPE with Metaspace) or
  // a tiktoken rank file (path ending in ".tiktoken"). Errors (NotFound, InvalidArgument,
  // Corruption) name the file and the JSON key or line that is wrong. The caller owns the
  // returned tokenizer.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path);
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path,
                                                 const TokenizerLoadOptions& options);
  virtual ~Tokenizer();

  // Token ids of `text`, which may hold arbitrary bytes: bytes that are not valid UTF-8 become
  // pieces of one byte each, so decode(encode(x)) == x for byte-level tokenizers. Special
  // tokens written in the text (e.g. "<|endoftext|>") are recognized when allow_special, as
  // Hugging Face does for added tokens; otherwise they are encoded as ordinary text.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const = 0;
  // Text of `ids`. InvalidArgument naming the first id that is negative or >= vocab_size().
  virtual Result<std::string> decode(std::span<const int32_t> ids) const = 0;
  // Number of ids, including added and special tokens (max id + 1).
  virtual int32_t vocab_size() const = 0;
  // Id of a token given in its vocabulary spelling (for byte-level BPE the byte-to-unicode
  // form, e.g. "Ġthe"; special tokens as written, e.g. "<|endoftext|>").
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  // End-of-document id: the first of <|endoftext|>, <|end_of_text|>, </s>, <eos>, <|eot_id|>,
  // <|im_end|> present among the special tokens; -1 when there is none (docs/tokenizer.md).
  virtual int32_t eos_id() const = 0;
  // Hex SHA-256 of the normalized content (kind, split patterns, vocabulary bytes and ids,
  // merges, special tokens); equal for equal tokenizers regardless of JSON formatting.
  virtual const std::string& content_hash() const = 0;
  // "byte-level-bpe", "byte-fallback-bpe" or "tiktoken".
  virtual std::string kind() const = 0;
};

// Encodes many documents on `threads` threads (<= 1: the calling thread only); result[i] ==
// tokenizer.encode(texts[i]).
std::vector<std::vector<int32_t>> encode_batch(const Tokenizer& tokenizer,
                                               std::span<const std::string> texts, int threads);

}  // namespace ms::data
