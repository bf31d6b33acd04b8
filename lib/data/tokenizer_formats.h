// Loaders for each tokenizer file format, turning file text into a BpeTokenizer. Internal to
// lib/data: callers use Tokenizer::load(), which picks the loader from the file.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "data/tokenizer_bpe.h"

namespace ms::data {

// Hugging Face tokenizer.json. `path` is only used in error messages.
Result<std::unique_ptr<BpeTokenizer>> load_hf_tokenizer_json(const std::string& path,
                                                             std::string_view text);

// tiktoken rank file with the named encoding's split pattern and special tokens (see
// TokenizerLoadOptions for names).
Result<std::unique_ptr<BpeTokenizer>> load_tiktoken(const std::string& path, std::string_view text,
                                                    const std::string& encoding);

// The encoding name a .tiktoken file's name implies ("cl100k_base.tiktoken" -> "cl100k_base"),
// "gpt2" when it names none.
std::string tiktoken_encoding_from_path(const std::string& path);

}  // namespace ms::data
