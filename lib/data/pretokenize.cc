// PCRE2-backed pre-splitting (see pretokenize.h). Patterns compile with PCRE2_UTF | PCRE2_UCP so
// \s, \p{L} and \p{N} follow Unicode as the reference tokenizers do, and are JIT-compiled; the
// text is validated by the caller, so matching skips PCRE2's own UTF check.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/pretokenize.h"

#include <pcre2.h>

#include <cstdint>

namespace ms::data {
namespace {

// Per-thread match data and JIT stack: they are not tied to one pattern, and creating them per
// call would cost more than the match on short pieces.
struct ThreadMatchState {
  ThreadMatchState() {
    match_data = pcre2_match_data_create(1, nullptr);
    jit_stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, jit_stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
    pcre2_match_data_free(match_data);
  }
  pcre2_match_data* match_data;
  pcre2_jit_stack* jit_stack;
  pcre2_match_context* context;
};

ThreadMatchState& thread_match_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Result<std::shared_ptr<const SplitRegex>> SplitRegex::compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return InvalidArgument("split regex does not compile at offset " + std::to_string(offset) +
                           ": " + reinterpret_cast<const char*>(message) + " (pattern: " +
                           pattern + ")");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT fails
  return std::shared_ptr<const SplitRegex>(new SplitRegex(pattern, code));
}

SplitRegex::~SplitRegex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void SplitRegex::split(std::string_view text, std::vector<std::string_view>& pieces) const {
  split(text, 0, pieces, SIZE_MAX);
}

size_t SplitRegex::split(std::string_view text, size_t from, std::vector<std::string_view>& pieces,
                         size_t max_pieces) const {
  ThreadMatchState& state = thread_match_state();
  auto* code = static_cast<pcre2_code*>(code_);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t first = pieces.size();
  size_t gap_begin = from;
  size_t pos = from;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK,
                               state.match_data, state.context);
    if (rc < 0) break;  // no further match (or a resource limit): the rest is one gap
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.match_data);
    const size_t begin = ovector[0], end = ovector[1];
    if (end == begin) {  // empty match: step one character so the loop always advances
      pos = begin + 1;
      while (pos < text.size() && (static_cast<uint8_t>(text[pos]) & 0xC0) == 0x80) ++pos;
      continue;
    }
    if (begin > gap_begin) pieces.push_back(text.substr(gap_begin, begin - gap_begin));
    pieces.push_back(text.substr(begin, end - begin));
    gap_begin = pos = end;
    // Stopping right after a match leaves no gap open, so a resumed call starts clean.
    if (pieces.size() - first >= max_pieces && pos < text.size()) return pos;
  }
  if (gap_begin < text.size()) pieces.push_back(text.substr(gap_begin));
  return text.size();
}

std::optional<std::string> named_split_pattern(std::string_view name) {
  if (name == "gpt2" || name == "r50k_base" || name == "p50k_base") {
    return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  }
  if (name == "cl100k_base") {
    return R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
  }
  if (name == "llama3") {
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  if (name == "o200k_base") {
    return R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  }
  return std::nullopt;
}

}  // namespace ms::data
