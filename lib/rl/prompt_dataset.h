// The RL prompt set: JSON lines, one object per line with a string `prompt` and an `answer`
// (a string, or a number, which is kept as its JSON text); other fields are ignored. A file
// ending in .zst is decompressed first. Blank lines are skipped; anything else that is not such
// an object fails with Corruption naming file:line, so a typo never silently drops prompts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::rl {

struct PromptExample {
  std::string prompt;
  std::string answer;
};

// `source` names the text in errors (the file path).
Result<std::vector<PromptExample>> parse_prompt_lines(std::string_view text,
                                                     const std::string& source);

// Reads a .jsonl or .jsonl.zst file. NotFound / IOError from the file layer, Corruption for
// bad lines or a file without a single prompt.
Result<std::vector<PromptExample>> read_prompt_dataset(const std::string& path);

}  // namespace ms::rl
