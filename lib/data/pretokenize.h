// Regex pre-splitting of text into pieces before BPE, with PCRE2 in UTF + UCP mode and JIT.
// The pieces cover the input exactly: matches and the gaps between them are both pieces
// (Hugging Face's "Isolated" split behaviour), so no byte is ever dropped. Also the table of
// named split patterns (GPT-2, cl100k/Llama-3, o200k) shared by tiktoken files and the trainer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::data {

class SplitRegex {
 public:
  // Compiles `pattern` (UTF-8, Unicode properties). InvalidArgument with PCRE2's message and
  // the offset in the pattern when it does not compile.
  static Result<std::shared_ptr<const SplitRegex>> compile(const std::string& pattern);
  ~SplitRegex();
  SplitRegex(const SplitRegex&) = delete;
  SplitRegex& operator=(const SplitRegex&) = delete;

  // Appends to `pieces` the matches and gaps of `text`, which must be well-formed UTF-8.
  // Thread-safe: matching state is per thread.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const;
  // The same from offset `from` (0, or what an earlier call returned), stopping once at least
  // `max_pieces` pieces were appended: returns the offset to resume at, text.size() when the
  // text is done. Resuming gives exactly the pieces of one whole call (matching still sees the
  // text before `from`), so a long text is split in batches of bounded memory.
  size_t split(std::string_view text, size_t from, std::vector<std::string_view>& pieces,
               size_t max_pieces) const;

  const std::string& pattern() const { return pattern_; }

 private:
  SplitRegex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}
  std::string pattern_;
  void* code_;  // pcre2_code_8*
};

// The split pattern of a named encoding: "gpt2" (also r50k_base, p50k_base), "cl100k_base"
// (also "llama3", Llama-3's tokenizer.json variant), "o200k_base". nullopt for other names.
std::optional<std::string> named_split_pattern(std::string_view name);

}  // namespace ms::data
