#include "rl/prompt_dataset.h"

#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/zstd_stream.h"

namespace ms::rl {
namespace {

constexpr uint64_t kMaxPromptFileBytes = uint64_t{1} << 32;  // 4 GiB as stored

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

}  // namespace

Result<std::vector<PromptExample>> parse_prompt_lines(std::string_view text,
                                                     const std::string& source) {
  std::vector<PromptExample> examples;
  size_t start = 0;
  int64_t line_number = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    ++line_number;
    start = end + 1;
    if (blank(line)) continue;
    const std::string where = source + ":" + std::to_string(line_number);
    const nlohmann::json object = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (object.is_discarded()) return Corruption(where + ": not valid JSON");
    if (!object.is_object()) return Corruption(where + ": expected a JSON object");
    const auto prompt = object.find("prompt");
    if (prompt == object.end() || !prompt->is_string()) {
      return Corruption(where + ": missing string field 'prompt'");
    }
    const auto answer = object.find("answer");
    if (answer == object.end() || !(answer->is_string() || answer->is_number())) {
      return Corruption(where + ": missing field 'answer' (a string or a number)");
    }
    PromptExample example;
    example.prompt = prompt->get<std::string>();
    example.answer = answer->is_string() ? answer->get<std::string>() : answer->dump();
    if (example.prompt.empty()) return Corruption(where + ": empty 'prompt'");
    examples.push_back(std::move(example));
  }
  if (examples.empty()) return Corruption(source + ": no prompts");
  return examples;
}

Result<std::vector<PromptExample>> read_prompt_dataset(const std::string& path) {
  MS_ASSIGN_OR_RETURN(std::string stored, io::read_file(path, kMaxPromptFileBytes, "prompt dataset"));
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".zst") == 0) {
    Result<std::string> text = io::decompress(stored);
    if (!text.ok()) return text.status().with_context(path);
    return parse_prompt_lines(*text, path);
  }
  return parse_prompt_lines(stored, path);
}

}  // namespace ms::rl
