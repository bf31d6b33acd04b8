// The parts of Schema<T> that do not depend on T: locating errors, loading YAML text and
// files, and laying out the help listing and the Markdown reference.
#include "config/schema.h"

#include <algorithm>

#include "io/atomic_file.h"

namespace ms::config {

std::string locate(const Origin& origin, const YAML::Mark& mark) {
  if (!origin.has_marks || mark.is_null()) return origin.name;
  return origin.name + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

Result<YAML::Node> load_yaml(std::string_view text, const Origin& origin) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return InvalidArgument(locate(origin, e.mark) + ": invalid YAML: " + e.msg);
  }
}

Result<std::string> read_config_file(const std::string& path) {
  Result<std::string> text = io::read_file(path, io::kMaxConfigFileBytes, "config file");
  if (text.status().code() == StatusCode::kNotFound) {
    return NotFound("config file '" + path + "' does not exist");
  }
  return text;
}

Status errors_to_status(const std::vector<std::string>& errors) {
  if (errors.empty()) return Status::OK();
  std::string message;
  for (const std::string& e : errors) message += (message.empty() ? "" : "\n") + e;
  return InvalidArgument(message);
}

namespace {

std::string pad(const std::string& text, std::size_t width) {
  return text + std::string(width > text.size() ? width - text.size() : 0, ' ');
}

std::string escape_cell(const std::string& text) {
  std::string escaped;
  for (char c : text) {
    if (c == '|') escaped += '\\';
    escaped += c;
  }
  return escaped;
}

std::string code(const std::string& text) { return "`" + escape_cell(text) + "`"; }

}  // namespace

std::string format_help(const std::vector<KeyDoc>& keys) {
  std::size_t key_width = 0, type_width = 0, default_width = 0;
  for (const KeyDoc& k : keys) {
    key_width = std::max(key_width, k.key.size());
    type_width = std::max(type_width, k.type.size());
    default_width = std::max(default_width, k.default_value.size());
  }
  std::string text = pad("KEY", key_width) + "  " + pad("TYPE", type_width) + "  " +
                     pad("DEFAULT", default_width) + "  DESCRIPTION\n";
  for (const KeyDoc& k : keys) {
    std::string line = pad(k.key, key_width) + "  " + pad(k.type, type_width) + "  " +
                       pad(k.default_value, default_width) + "  " + k.description;
    if (!k.constraints.empty()) line += " [" + k.constraints + "]";
    text += line + "\n";
  }
  return text;
}

std::string format_markdown(const std::vector<KeyDoc>& keys,
                            const std::vector<std::string>& rules) {
  std::string text =
      "| Key | Type | Default | Allowed | Description |\n"
      "|-----|------|---------|---------|-------------|\n";
  for (const KeyDoc& k : keys) {
    text += "| " + code(k.key) + " | " + escape_cell(k.type) + " | " + code(k.default_value) +
            " | " + escape_cell(k.constraints) + " | " + escape_cell(k.description) + " |\n";
  }
  if (!rules.empty()) {
    text += "\nRules between keys, checked after the file and every `--set`:\n\n";
    for (const std::string& rule : rules) text += "- " + rule + "\n";
  }
  return text;
}

}  // namespace ms::config
