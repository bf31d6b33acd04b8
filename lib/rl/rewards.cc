#include "rl/rewards.h"

#include <cctype>
#include <charconv>
#include <string>

namespace ms::rl {
namespace {

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Parses an integer at `pos` (sign then digits); advances pos past it.
std::optional<int64_t> integer_at(std::string_view text, size_t& pos) {
  size_t start = pos;
  if (text[pos] == '-') ++pos;
  size_t digits = pos;
  while (pos < text.size() && is_digit(text[pos])) ++pos;
  if (pos == digits) return std::nullopt;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data() + start, text.data() + pos, value);
  if (ec != std::errc() || end != text.data() + pos) return std::nullopt;  // overflow
  return value;
}

}  // namespace

std::optional<int64_t> first_integer(std::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    const bool starts = is_digit(text[i]) || (text[i] == '-' && i + 1 < text.size() && is_digit(text[i + 1]));
    if (!starts) continue;
    size_t pos = i;
    return integer_at(text, pos);
  }
  return std::nullopt;
}

Result<bool> answer_matches(std::string_view response, std::string_view answer) {
  size_t pos = 0;
  std::optional<int64_t> expected = answer.empty() ? std::nullopt : integer_at(answer, pos);
  if (!expected || pos != answer.size()) {
    return InvalidArgument("reference answer '" + std::string(answer) + "' is not an integer");
  }
  const std::optional<int64_t> given = first_integer(response);
  return given.has_value() && *given == *expected;
}

bool format_ok(std::string_view response) {
  while (!response.empty() && std::isspace(static_cast<unsigned char>(response.front()))) {
    response.remove_prefix(1);
  }
  while (!response.empty() && std::isspace(static_cast<unsigned char>(response.back()))) {
    response.remove_suffix(1);
  }
  if (response.empty() || response.back() != '.') return false;
  const std::string_view body = response.substr(0, response.size() - 1);
  if (body.find_first_of(".?!\n") != std::string_view::npos) return false;  // one sentence
  int numbers = 0;
  for (size_t i = 0; i < body.size();) {
    if (is_digit(body[i])) {
      ++numbers;
      while (i < body.size() && is_digit(body[i])) ++i;
    } else {
      ++i;
    }
  }
  return numbers == 1;
}

Result<double> overlong_penalty(int64_t length, int64_t max_len, int64_t cache_len) {
  if (cache_len <= 0 || cache_len > max_len) {
    return InvalidArgument("overlong shaping needs 0 < cache_len <= max_len, got cache_len " +
                           std::to_string(cache_len) + " and max_len " + std::to_string(max_len));
  }
  const int64_t free_len = max_len - cache_len;
  if (length <= free_len) return 0.0;
  if (length > max_len) return -1.0;
  return static_cast<double>(free_len - length) / static_cast<double>(cache_len);
}

}  // namespace ms::rl
