// How each kind of config value is read from and written to YAML: bool, int64_t, double,
// std::string, enums (named through enum_names(), found by argument-dependent lookup) and
// std::vector of those. One codec per C++ type, so a schema field's YAML form follows from the
// type of the struct member it binds; nothing is declared twice.
//
// Scalars are parsed strictly from their text (an integer field refuses "1.5" and "0x10", a
// number field refuses "nan"), and errors come back as a phrase such as
// "expects an integer, got 'ten'" that the schema prefixes with the location and key.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/status.h"

namespace ms::config {

// One spelling of an enum value. An enum E becomes usable in configs by declaring, in E's
// namespace, `std::span<const EnumName<E>> enum_names(E)` returning every value's name.
template <typename E>
struct EnumName {
  std::string_view name;
  E value;
};

template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { enum_names(e) } -> std::convertible_to<std::span<const EnumName<E>>>;
};

template <NamedEnum E>
std::string_view enum_to_name(E value) {
  for (const EnumName<E>& entry : enum_names(E{})) {
    if (entry.value == value) return entry.name;
  }
  return "<unnamed>";
}

template <NamedEnum E>
std::optional<E> enum_from_name(std::string_view name) {
  for (const EnumName<E>& entry : enum_names(E{})) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

// Text helpers shared by the codecs (value_codec.cc).
std::optional<bool> parse_bool(std::string_view text);
std::optional<int64_t> parse_int64(std::string_view text);
// Finite numbers only: a config never means NaN or infinity.
std::optional<double> parse_double(std::string_view text);
// Shortest text that reads back as exactly `value`: "0.0003", "10000", and for magnitudes
// below 1e-4 or from 1e15 "1.0e-8" (with a '.', so YAML 1.1 readers also see a float).
std::string format_double(double value);
// "'ten'", "a list", "a mapping" or "nothing": how an offending node is named in errors.
std::string describe_node(const YAML::Node& node);
// Emits a string so any YAML reader reads it back as that string (quoted when it would
// otherwise read as a bool, number or null).
void emit_string(YAML::Emitter& out, const std::string& value);

Status type_mismatch(std::string_view expected, const YAML::Node& node);

template <typename V>
struct Codec;

template <>
struct Codec<bool> {
  std::string type_name() const { return "bool"; }
  std::string expected() const { return "a bool (true or false)"; }
  Result<bool> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, bool value) const { out << (value ? "true" : "false"); }
};

template <>
struct Codec<int64_t> {
  std::string type_name() const { return "integer"; }
  std::string expected() const { return "an integer"; }
  Result<int64_t> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, int64_t value) const { out << std::to_string(value); }
};

template <>
struct Codec<double> {
  std::string type_name() const { return "number"; }
  std::string expected() const { return "a number"; }
  Result<double> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, double value) const { out << format_double(value); }
};

// A null value (`key:` with nothing after it) reads as the empty string.
template <>
struct Codec<std::string> {
  std::string type_name() const { return "string"; }
  std::string expected() const { return "a string"; }
  Result<std::string> decode(const YAML::Node& node) const;
  void emit(YAML::Emitter& out, const std::string& value) const { emit_string(out, value); }
};

template <NamedEnum E>
struct Codec<E> {
  std::string type_name() const { return "enum"; }
  std::string expected() const { return "one of " + choices(); }
  std::string choices() const {
    std::string text;
    for (const EnumName<E>& entry : enum_names(E{})) {
      if (!text.empty()) text += ", ";
      text += entry.name;
    }
    return text;
  }
  Result<E> decode(const YAML::Node& node) const {
    if (node.IsScalar()) {
      if (std::optional<E> value = enum_from_name<E>(node.Scalar())) return *value;
    }
    return type_mismatch(expected(), node);
  }
  void emit(YAML::Emitter& out, E value) const { out << std::string(enum_to_name(value)); }
};

// A YAML sequence (block or flow) of elements; a bad element is named by its 1-based position.
template <typename E>
struct Codec<std::vector<E>> {
  Codec<E> element;

  std::string type_name() const { return "list of " + plural(element.type_name()); }
  std::string expected() const { return "a list of " + plural(element.type_name()); }
  Result<std::vector<E>> decode(const YAML::Node& node) const {
    if (!node.IsSequence()) return type_mismatch(expected(), node);
    std::vector<E> values;
    for (std::size_t i = 0; i < node.size(); ++i) {
      Result<E> item = element.decode(node[i]);
      if (!item.ok()) {
        return InvalidArgument("expects " + expected() + ", got " + describe_node(node[i]) +
                               " as item " + std::to_string(i + 1));
      }
      values.push_back(std::move(item).value());
    }
    return values;
  }
  void emit(YAML::Emitter& out, const std::vector<E>& values) const {
    out << YAML::Flow << YAML::BeginSeq;
    for (const E& value : values) element.emit(out, value);
    out << YAML::EndSeq;
  }

 private:
  static std::string plural(const std::string& noun) { return noun + "s"; }
};

// The value as one line of flow YAML ("0.0003", "[0.9, 0.95]", "\"\""), for help and docs.
template <typename V>
std::string value_text(const Codec<V>& codec, const V& value) {
  YAML::Emitter out;
  out << YAML::Flow;
  codec.emit(out, value);
  return out.c_str();
}

}  // namespace ms::config
