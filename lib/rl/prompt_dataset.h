// The RL prompt set: JSON lines, one object per line with a string `prompt` and an `answer`
// (a string, or a number, which is kept as its JSON text); other fields are ignored. A file
// ending in .zst is decompressed first. Blank lines are skipped; anything else that is not such
// an object fails with Corruption naming file:line, so a typo never silently drops prompts.
//
// Or a pair of ms-data datasets built from such JSON lines (`ms-data build --text-key prompt`
// and `--text-key answer`): tokenized once, memory-mapped, document i of each forming example
// i, decoded with the actor's tokenizer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/tokenizer.h"

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

// The dataset pair at `prompts_prefix` and `answers_prefix` (<prefix>.bin/.idx/.meta.json),
// each document's trailing end-of-document id dropped. InvalidArgument when a sidecar names
// another tokenizer (its content hash differs from `tokenizer`'s) or the two hold different
// document counts; Corruption naming the prefix and document for an empty prompt; the
// dataset reader's errors otherwise.
Result<std::vector<PromptExample>> read_prompt_datasets(const std::string& prompts_prefix,
                                                        const std::string& answers_prefix,
                                                        const data::Tokenizer& tokenizer);

}  // namespace ms::rl
