// Tokenizer::load picks the loader from the file (tiktoken by its .tiktoken suffix, otherwise
// Hugging Face tokenizer.json), and encode_batch spreads documents over a thread pool.
#include "data/tokenizer.h"

#include <new>

#include "core/thread_pool.h"
#include "data/tokenizer_formats.h"
#include "io/atomic_file.h"

namespace ms::data {

Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path) {
  return load(path, TokenizerLoadOptions{});
}

namespace {

Result<std::unique_ptr<Tokenizer>> parse_tokenizer(const std::string& path, std::string_view text,
                                                   const TokenizerLoadOptions& options) {
  if (path.ends_with(".tiktoken")) {
    const std::string encoding = options.tiktoken_encoding.empty()
                                     ? tiktoken_encoding_from_path(path)
                                     : options.tiktoken_encoding;
    MS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, load_tiktoken(path, text, encoding));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  MS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, load_hf_tokenizer_json(path, text));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& path,
                                                   const TokenizerLoadOptions& options) {
  Result<std::string> text = io::read_file(path, io::kMaxTokenizerFileBytes, "tokenizer");
  if (!text.ok()) return text.status().with_context("loading tokenizer");
  // Every size a file claims is bounded before it is used; this names the file should the
  // machine still run out of memory on a legitimately huge one.
  try {
    return parse_tokenizer(path, *text, options);
  } catch (const std::bad_alloc&) {
    return Unavailable("tokenizer '" + path + "': out of memory while loading its " +
                       std::to_string(text->size()) + " bytes");
  }
}

std::vector<std::vector<int32_t>> encode_batch(const Tokenizer& tokenizer,
                                               std::span<const std::string> texts, int threads) {
  std::vector<std::vector<int32_t>> out(texts.size());
  auto encode_range = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) out[i] = tokenizer.encode(texts[i]);
  };
  if (threads <= 1 || texts.size() < 2) {
    encode_range(0, static_cast<int64_t>(texts.size()));
    return out;
  }
  // The calling thread works too, so threads - 1 workers give `threads` encoders.
  ThreadPool pool(static_cast<size_t>(threads - 1));
  pool.parallel_for(0, static_cast<int64_t>(texts.size()), encode_range);
  return out;
}

}  // namespace ms::data
