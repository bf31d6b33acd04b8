// Schema<T>: every key of a config struct T declared once, with its dotted path, the struct
// member it binds, a one-line description and its constraints; that one declaration drives
// parsing, validation, `--set` overrides, the resolved-config dump, the help listing and the
// Markdown reference in docs/. Defaults are the struct's member initializers, so `T{}` is
// always the default config and cannot drift from what help and docs print.
//
//   Schema<RunConfig> s;
//   s.add("optim.lr", "Peak learning rate.", &RunConfig::optim, &OptimConfig::lr).above(0);
//   s.add_rule("train.seq_len <= model.max_seq_len", [](const RunConfig& c) { ... });
//   Result<RunConfig> cfg = s.parse_text(yaml, "run.yaml", {"train.steps=10"});
//
// A member's C++ type picks its YAML form (value_codec.h). Parsing collects every error of a
// file and its overrides before returning, so one run shows all the typos, each as
// "file:line:col: message" (1-based).
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "config/key_tree.h"
#include "config/value_codec.h"
#include "core/status.h"

namespace ms::config {

// One declared key, seen without its value type.
template <typename T>
class FieldBase {
 public:
  FieldBase(std::string path, std::string description)
      : path_(std::move(path)), description_(std::move(description)) {}
  virtual ~FieldBase() = default;

  const std::string& path() const { return path_; }
  const std::string& description() const { return description_; }
  virtual std::string type_name() const = 0;
  // Constraints in words ("> 0", "in [0, 1)", "one of: adamw, lamb"); empty when none.
  virtual std::string constraint_text() const = 0;
  // The value in `config` as one line of flow YAML.
  virtual std::string value_text(const T& config) const = 0;
  virtual void emit(YAML::Emitter& out, const T& config) const = 0;
  // Decodes `node`, checks the constraints and stores the value into `config`. On failure
  // `config` is unchanged and the Status message is a phrase to follow the key name
  // ("expects an integer, got 'ten'").
  virtual Status assign(const YAML::Node& node, T& config) const = 0;

 private:
  std::string path_;
  std::string description_;
};

template <typename V>
struct ElementOf {
  using type = V;
};
template <typename E>
struct ElementOf<std::vector<E>> {
  using type = E;
};

template <typename T, typename V>
class Field final : public FieldBase<T> {
 public:
  using Element = typename ElementOf<V>::type;
  static constexpr bool kIsList = !std::is_same_v<Element, V>;
  static constexpr bool kIsNumeric =
      std::is_same_v<Element, int64_t> || std::is_same_v<Element, double>;

  Field(std::string path, std::string description, std::function<V&(T&)> get,
        std::function<const V&(const T&)> get_const)
      : FieldBase<T>(std::move(path), std::move(description)),
        get_(std::move(get)),
        get_const_(std::move(get_const)) {}

  // Numeric bounds; on a list they apply to every item.
  Field& at_least(Element bound) requires kIsNumeric { return set_lower(bound, true); }
  Field& above(Element bound) requires kIsNumeric { return set_lower(bound, false); }
  Field& at_most(Element bound) requires kIsNumeric { return set_upper(bound, true); }
  Field& below(Element bound) requires kIsNumeric { return set_upper(bound, false); }

  // A string restricted to a fixed set of spellings (for open sets use an enum member).
  Field& one_of(std::vector<std::string> allowed) requires std::is_same_v<V, std::string> {
    allowed_ = std::move(allowed);
    return *this;
  }
  Field& non_empty() requires(std::is_same_v<V, std::string> || kIsList) {
    non_empty_ = true;
    return *this;
  }
  Field& length(std::size_t n) requires kIsList {
    length_ = n;
    return *this;
  }

  std::string type_name() const override { return codec_.type_name(); }
  std::string constraint_text() const override;
  std::string value_text(const T& config) const override {
    return ms::config::value_text(codec_, get_const_(config));
  }
  void emit(YAML::Emitter& out, const T& config) const override {
    codec_.emit(out, get_const_(config));
  }
  Status assign(const YAML::Node& node, T& config) const override {
    Result<V> value = codec_.decode(node);
    if (!value.ok()) return value.status();
    MS_RETURN_IF_ERROR(check(*value));
    get_(config) = std::move(value).value();
    return Status::OK();
  }

 private:
  struct Bound {
    Element value;
    bool inclusive;
  };

  Field& set_lower(Element bound, bool inclusive) {
    lower_ = Bound{bound, inclusive};
    return *this;
  }
  Field& set_upper(Element bound, bool inclusive) {
    upper_ = Bound{bound, inclusive};
    return *this;
  }

  std::string element_text(const Element& e) const {
    return ms::config::value_text(Codec<Element>{}, e);
  }
  std::string range_text() const;
  std::string allowed_text() const {
    std::string list;
    for (const std::string& a : allowed_) list += (list.empty() ? "" : ", ") + a;
    return list;
  }
  bool in_range(const Element& e) const;
  Status check(const V& value) const;

  std::function<V&(T&)> get_;
  std::function<const V&(const T&)> get_const_;
  Codec<V> codec_;
  std::optional<Bound> lower_;
  std::optional<Bound> upper_;
  std::vector<std::string> allowed_;
  bool non_empty_ = false;
  std::optional<std::size_t> length_;
};

// A constraint between keys, checked after the file and every override are applied.
template <typename T>
struct Rule {
  std::string description;  // for docs, e.g. "model.d_model divisible by model.n_heads"
  // The violation with the values involved, or nothing when the rule holds.
  std::function<std::optional<std::string>(const T&)> violation;
};

// Where values come from, for error prefixes: a file (with line:column from YAML marks) or a
// `--set` argument (the argument itself).
struct Origin {
  std::string name;
  bool has_marks = true;
};

// "name:line:col" (1-based) when `origin` has marks and `mark` is known, otherwise "name".
std::string locate(const Origin& origin, const YAML::Mark& mark);
// Parses YAML text; syntax errors come back as "source:line:col: invalid YAML: <why>".
Result<YAML::Node> load_yaml(std::string_view text, const Origin& origin);
// Whole file as text, through io::read_file with the cap of a config file (so /dev/zero or a
// FIFO is refused, not read forever); a missing file is NotFound naming it.
Result<std::string> read_config_file(const std::string& path);
// InvalidArgument holding every message, one a line; OK when there are none.
Status errors_to_status(const std::vector<std::string>& errors);
// Shared layout of the help listing and the Markdown reference.
struct KeyDoc {
  std::string key, type, default_value, constraints, description;
};
std::string format_help(const std::vector<KeyDoc>& keys);
std::string format_markdown(const std::vector<KeyDoc>& keys,
                            const std::vector<std::string>& rules);

template <typename T>
class Schema {
 public:
  // Declares key `path`, bound to config.*m1.*m2... (members of nested structs, outermost
  // first). Returns the field so constraints can be chained. Paths must be unique.
  template <typename... Members>
  auto& add(std::string path, std::string description, Members... members) {
    using V = std::remove_cvref_t<decltype((std::declval<T&>() .* ... .* members))>;
    auto field = std::make_unique<Field<T, V>>(
        path, std::move(description),
        [members...](T& config) -> V& { return (config .* ... .* members); },
        [members...](const T& config) -> const V& { return (config .* ... .* members); });
    Field<T, V>& ref = *field;
    tree_.add_leaf(path, fields_.size());
    fields_.push_back(std::move(field));
    return ref;
  }

  // Declares a constraint between keys; see Rule.
  void add_rule(std::string description,
                std::function<std::optional<std::string>(const T&)> violation) {
    rules_.push_back(Rule<T>{std::move(description), std::move(violation)});
  }

  // Defaults, then the YAML `text` (named `source_name` in errors), then each "a.b=value" of
  // `sets` in order, then the rules. Every problem found is reported, one a line, as
  // InvalidArgument.
  Result<T> parse_text(std::string_view text, std::string_view source_name,
                       const std::vector<std::string>& sets = {}) const {
    const Origin origin{std::string(source_name)};
    MS_ASSIGN_OR_RETURN(YAML::Node root, load_yaml(text, origin));
    T config{};
    std::vector<std::string> errors;
    apply_document(root, origin, config, errors);
    for (const std::string& set : sets) apply_set(set, config, errors);
    MS_RETURN_IF_ERROR(errors_to_status(errors));
    for (const Rule<T>& rule : rules_) {
      if (std::optional<std::string> v = rule.violation(config)) {
        errors.push_back(std::string(source_name) + ": " + *v);
      }
    }
    MS_RETURN_IF_ERROR(errors_to_status(errors));
    return config;
  }

  // parse_text on the contents of the file at `path`.
  Result<T> parse_file(const std::string& path, const std::vector<std::string>& sets = {}) const {
    MS_ASSIGN_OR_RETURN(std::string text, read_config_file(path));
    return parse_text(text, path, sets);
  }

  // Every key with its value in `config`, nested by section in declaration order; reading the
  // output back gives `config` again exactly. With `describe`, each key carries its
  // description as a comment.
  std::string dump(const T& config, bool describe = false) const {
    YAML::Emitter out;
    emit_section(out, KeyTree::kRoot, config, describe);
    return std::string(out.c_str()) + "\n";
  }

  // One line per key: key, type, default, description and constraints.
  std::string help() const { return format_help(key_docs()); }
  // The key reference as a Markdown table, followed by the rules between keys.
  std::string markdown() const {
    std::vector<std::string> rules;
    for (const Rule<T>& rule : rules_) rules.push_back(rule.description);
    return format_markdown(key_docs(), rules);
  }

  const std::vector<std::unique_ptr<FieldBase<T>>>& fields() const { return fields_; }

 private:
  void apply_document(const YAML::Node& root, const Origin& origin, T& config,
                      std::vector<std::string>& errors) const {
    if (root.IsNull()) return;
    if (!root.IsMap()) {
      errors.push_back(locate(origin, root.Mark()) + ": expects a mapping of config sections, got " +
                       describe_node(root));
      return;
    }
    apply_map(KeyTree::kRoot, root, origin, config, errors);
  }

  void apply_map(std::size_t section, const YAML::Node& map, const Origin& origin, T& config,
                 std::vector<std::string>& errors) const {
    std::vector<std::pair<std::string, int>> seen;  // key, 1-based line
    for (const auto& entry : map) {
      const YAML::Node& key = entry.first;
      const std::string name = key.IsScalar() ? key.Scalar() : describe_node(key);
      const std::string path = tree_.join(section, name);
      for (const auto& [previous, line] : seen) {
        if (previous == name) {
          errors.push_back(locate(origin, key.Mark()) + ": duplicate key '" + path +
                           "' (first given on line " + std::to_string(line) + ")");
        }
      }
      seen.emplace_back(name, key.Mark().line + 1);
      std::optional<std::size_t> node = tree_.child(section, name);
      if (!node) {
        errors.push_back(locate(origin, key.Mark()) + ": " + unknown_key(path));
        continue;
      }
      apply_value(*node, entry.second, key.Mark(), origin, config, errors);
    }
  }

  // `key_mark` locates errors about a null value, which has no position of its own.
  void apply_value(std::size_t node, const YAML::Node& value, const YAML::Mark& key_mark,
                   const Origin& origin, T& config, std::vector<std::string>& errors) const {
    const std::string& path = tree_.path(node);
    if (tree_.is_leaf(node)) {
      Status s = fields_[tree_.field(node)]->assign(value, config);
      if (!s.ok()) {
        const YAML::Mark& mark = value.IsNull() ? key_mark : value.Mark();
        errors.push_back(locate(origin, mark) + ": '" + path + "' " + s.message());
      }
    } else if (value.IsMap()) {
      apply_map(node, value, origin, config, errors);
    } else if (!value.IsNull()) {
      errors.push_back(locate(origin, value.Mark()) + ": '" + path +
                       "' is a section and expects a mapping of keys, got " +
                       describe_node(value));
    }
  }

  // "--set key=value": the value is read as YAML (a scalar, a flow list or a flow mapping for
  // a whole section) and goes through the same checks as the file.
  void apply_set(const std::string& set, T& config, std::vector<std::string>& errors) const {
    const Origin origin{"--set " + set, false};
    const std::size_t eq = set.find('=');
    if (eq == std::string::npos || eq == 0) {
      errors.push_back(origin.name + ": expected key=value, e.g. --set optim.lr=1e-4");
      return;
    }
    const std::string path = set.substr(0, eq);
    std::optional<std::size_t> node = tree_.find(path);
    if (!node || *node == KeyTree::kRoot) {
      errors.push_back(origin.name + ": " + unknown_key(path));
      return;
    }
    Result<YAML::Node> value = load_yaml(std::string_view(set).substr(eq + 1), origin);
    if (!value.ok()) {
      errors.push_back(value.status().message());
      return;
    }
    apply_value(*node, *value, YAML::Mark::null_mark(), origin, config, errors);
  }

  std::string unknown_key(const std::string& path) const {
    std::string message = "unknown key '" + path + "'";
    if (std::optional<std::string> meant = tree_.suggest(path)) {
      message += "; did you mean '" + *meant + "'?";
    }
    return message;
  }

  void emit_section(YAML::Emitter& out, std::size_t section, const T& config,
                    bool describe) const {
    out << YAML::BeginMap;
    for (std::size_t node : tree_.children(section)) {
      out << YAML::Key << tree_.name(node) << YAML::Value;
      if (!tree_.is_leaf(node)) {
        emit_section(out, node, config, describe);
        continue;
      }
      const FieldBase<T>& field = *fields_[tree_.field(node)];
      field.emit(out, config);
      if (describe) out << YAML::Comment(field.description());
    }
    out << YAML::EndMap;
  }

  std::vector<KeyDoc> key_docs() const {
    const T defaults{};
    std::vector<KeyDoc> docs;
    for (const auto& field : fields_) {
      docs.push_back(KeyDoc{field->path(), field->type_name(), field->value_text(defaults),
                            field->constraint_text(), field->description()});
    }
    return docs;
  }

  KeyTree tree_;
  std::vector<std::unique_ptr<FieldBase<T>>> fields_;
  std::vector<Rule<T>> rules_;
};

// ---- Field<T, V> constraint checks ----

template <typename T, typename V>
bool Field<T, V>::in_range(const Element& e) const {
  if constexpr (kIsNumeric) {
    if (lower_ && (lower_->inclusive ? e < lower_->value : e <= lower_->value)) return false;
    if (upper_ && (upper_->inclusive ? e > upper_->value : e >= upper_->value)) return false;
  }
  return true;
}

template <typename T, typename V>
std::string Field<T, V>::range_text() const {
  if (lower_ && upper_) {
    return std::string("in ") + (lower_->inclusive ? "[" : "(") + element_text(lower_->value) +
           ", " + element_text(upper_->value) + (upper_->inclusive ? "]" : ")");
  }
  if (lower_) return (lower_->inclusive ? ">= " : "> ") + element_text(lower_->value);
  if (upper_) return (upper_->inclusive ? "<= " : "< ") + element_text(upper_->value);
  return "";
}

template <typename T, typename V>
std::string Field<T, V>::constraint_text() const {
  std::vector<std::string> parts;
  if (!allowed_.empty()) parts.push_back("one of: " + allowed_text());
  if constexpr (NamedEnum<V>) parts.push_back("one of: " + codec_.choices());
  if (length_) parts.push_back(std::to_string(*length_) + " items");
  if (non_empty_) parts.push_back("not empty");
  const std::string range = range_text();
  if (!range.empty()) parts.push_back(kIsList ? "each " + range : range);
  std::string text;
  for (const std::string& p : parts) text += (text.empty() ? "" : "; ") + p;
  return text;
}

template <typename T, typename V>
Status Field<T, V>::check(const V& value) const {
  if constexpr (std::is_same_v<V, std::string>) {
    if (!allowed_.empty() && std::find(allowed_.begin(), allowed_.end(), value) == allowed_.end()) {
      return InvalidArgument("must be one of: " + allowed_text() + "; got '" + value + "'");
    }
  }
  if constexpr (std::is_same_v<V, std::string> || kIsList) {
    if (non_empty_ && value.empty()) return InvalidArgument("must not be empty");
  }
  if constexpr (kIsList) {
    if (length_ && value.size() != *length_) {
      return InvalidArgument("expects exactly " + std::to_string(*length_) + " items, got " +
                             std::to_string(value.size()) + ": " + ms::config::value_text(codec_, value));
    }
    for (const Element& e : value) {
      if (!in_range(e)) {
        return InvalidArgument("items must be " + range_text() + ", got " + element_text(e));
      }
    }
  } else if (!in_range(value)) {
    return InvalidArgument("must be " + range_text() + ", got " + element_text(value));
  }
  return Status::OK();
}

}  // namespace ms::config
