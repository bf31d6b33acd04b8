// Built-in verifiable rewards and DAPO's overlong shaping.
//   answer_matches: the first integer in the response equals the reference answer (the
//     arithmetic task's "Mia has 34 plums." against "34"); numeric, so "034" matches "34".
//   format_ok: the response is one sentence stating one integer and ending with a period,
//     the shape of the arithmetic corpus's answers.
//   overlong_penalty: 0 up to max_len - cache_len tokens, then falling linearly to -1 at
//     max_len (DAPO's soft overlong punishment), -1 beyond.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "core/status.h"

namespace ms::rl {

// The first integer (optional leading '-', then digits) in `text`, or nullopt.
std::optional<int64_t> first_integer(std::string_view text);

// InvalidArgument when `answer` is not an integer.
Result<bool> answer_matches(std::string_view response, std::string_view answer);

bool format_ok(std::string_view response);

// InvalidArgument unless 0 < cache_len <= max_len.
Result<double> overlong_penalty(int64_t length, int64_t max_len, int64_t cache_len);

}  // namespace ms::rl
