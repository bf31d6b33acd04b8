// The JSON forms of requests and completions: a prompts-file line parsed into a Request (the
// input of `ms-infer generate`), and a Completion written as JSON, either as the output line
// users read or in the form serving ranks send to rank 0 (which completion_from reads back).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"
#include "infer/engine.h"

namespace ms::infer {

// Which JSON a completion becomes.
enum class CompletionForm {
  // An output line of `ms-infer generate`, in this key order: id, text (a string; the caller
  // dumps it replacing invalid UTF-8), tokens, finish_reason, prompt_tokens, completion_tokens,
  // ttft_ms, latency_ms, and error only when there is one.
  kOutputLine,
  // From a serving rank to rank 0: every field completion_from reads back, the text as bytes (a
  // completion cut inside a UTF-8 sequence is not valid JSON text), the logits, and `index`, the
  // request's position in the whole request list.
  kBetweenRanks,
};

nlohmann::ordered_json completion_json(const Completion& c, CompletionForm form,
                                       size_t index = 0);

// The completion in a kBetweenRanks object; throws nlohmann::json::exception when a key is
// missing or has the wrong type.
Completion completion_from(const nlohmann::json& j);

// One prompts-file line -> a request: {"prompt": string, and optionally id (a non-string id is
// kept as its JSON text), max_tokens, temperature, top_p, top_k, seed, stop (a string or a list
// of strings)}; keys left out keep `defaults`. InvalidArgument naming `where` (file:line) and
// the key.
Result<Request> parse_request(std::string_view line, const std::string& where,
                              const data::Tokenizer& tok, const Request& defaults);

// A whole prompts file: every non-blank line is a request, or a refused completion
// (finish_reason "error", the reason in `error`) that keeps its place in the output.
struct ParsedPrompts {
  std::vector<Request> requests;
  std::vector<Completion> refused;  // malformed lines, in input order
  std::vector<int64_t> slot;        // per input line: index into requests, or -1 - refused
};

// Parses `text`, the content of the prompts file `path` (named in errors). Line n's request
// gets the id "line-<n>" unless it names one.
ParsedPrompts parse_prompts(std::string_view text, const std::string& path,
                            const data::Tokenizer& tok, const Request& defaults);

}  // namespace ms::infer
