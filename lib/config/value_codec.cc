// Strict scalar parsing for config values. std::from_chars rather than yaml-cpp's conversions:
// it refuses partial matches ("10x"), hex and octal, and its shortest round-trip formatting is
// what makes a dumped config reload bit-identically.
#include "config/value_codec.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>

namespace ms::config {
namespace {

std::string lowercase(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

bool reads_as_null(std::string_view text) {
  const std::string lower = lowercase(text);
  return lower.empty() || lower == "~" || lower == "null";
}

bool reads_as_special_float(std::string_view text) {
  const std::string lower = lowercase(text);
  return lower == ".inf" || lower == "-.inf" || lower == "+.inf" || lower == ".nan";
}

}  // namespace

std::optional<bool> parse_bool(std::string_view text) {
  const std::string lower = lowercase(text);
  if (lower == "true" || lower == "yes" || lower == "on") return true;
  if (lower == "false" || lower == "no" || lower == "off") return false;
  return std::nullopt;
}

std::optional<int64_t> parse_int64(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return value;
}

std::optional<double> parse_double(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::string format_double(double value) {
  // Plain decimals for everyday magnitudes, scientific notation for the very small or large;
  // both are the shortest text that reads back as exactly `value`.
  const double magnitude = std::fabs(value);
  const bool plain = magnitude == 0.0 || (magnitude >= 1e-4 && magnitude < 1e15);
  std::array<char, 64> buffer{};
  auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value,
                                 plain ? std::chars_format::fixed : std::chars_format::scientific);
  std::string text(buffer.data(), end);
  const std::size_t e = text.find('e');
  if (e == std::string::npos) return text;
  std::string mantissa = text.substr(0, e);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  std::string exponent = text.substr(e + 1);
  const char sign = exponent[0];
  exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return mantissa + "e" + (sign == '-' ? "-" : "") + exponent;
}

std::string describe_node(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return "'" + node.Scalar() + "'";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Map: return "a mapping";
    default: return "nothing";
  }
}

void emit_string(YAML::Emitter& out, const std::string& value) {
  const bool ambiguous = reads_as_null(value) || reads_as_special_float(value) ||
                         parse_bool(value) || parse_double(value);
  if (ambiguous) out << YAML::DoubleQuoted;
  out << value;
}

Status type_mismatch(std::string_view expected, const YAML::Node& node) {
  return InvalidArgument("expects " + std::string(expected) + ", got " + describe_node(node));
}

Result<bool> Codec<bool>::decode(const YAML::Node& node) const {
  if (node.IsScalar()) {
    if (std::optional<bool> value = parse_bool(node.Scalar())) return *value;
  }
  return type_mismatch(expected(), node);
}

Result<int64_t> Codec<int64_t>::decode(const YAML::Node& node) const {
  if (node.IsScalar()) {
    if (std::optional<int64_t> value = parse_int64(node.Scalar())) return *value;
  }
  return type_mismatch(expected(), node);
}

Result<double> Codec<double>::decode(const YAML::Node& node) const {
  if (node.IsScalar()) {
    if (std::optional<double> value = parse_double(node.Scalar())) return *value;
  }
  return type_mismatch(expected(), node);
}

Result<std::string> Codec<std::string>::decode(const YAML::Node& node) const {
  if (node.IsNull()) return std::string();
  if (node.IsScalar()) return node.Scalar();
  return type_mismatch(expected(), node);
}

}  // namespace ms::config
