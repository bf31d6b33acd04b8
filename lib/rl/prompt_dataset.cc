#include "rl/prompt_dataset.h"

#include <nlohmann/json.hpp>

#include "data/indexed_dataset.h"
#include "io/atomic_file.h"
#include "io/zstd_stream.h"

namespace ms::rl {
namespace {

constexpr uint64_t kMaxPromptFileBytes = uint64_t{1} << 32;  // 4 GiB as stored

bool blank(std::string_view line) {
  return line.find_first_not_of(" \t\r") == std::string_view::npos;
}

// Every document of `dataset` decoded with `tokenizer`, its trailing end-of-document id dropped.
Result<std::vector<std::string>> decode_documents(const data::IndexedDataset& dataset,
                                                  const data::Tokenizer& tokenizer) {
  const std::optional<data::DatasetMeta>& meta = dataset.meta();
  if (meta && !meta->tokenizer_hash.empty() &&
      meta->tokenizer_hash != tokenizer.content_hash()) {
    return InvalidArgument(dataset.prefix() + ".meta.json: built with tokenizer " +
                           meta->tokenizer_path + " (hash " + meta->tokenizer_hash +
                           "), not the actor's (hash " + tokenizer.content_hash() +
                           "): the ids would decode to other text");
  }
  const int64_t eos = meta ? meta->eos_id : tokenizer.eos_id();
  std::vector<std::string> out;
  std::vector<int32_t> tokens;
  const std::span<const int64_t> documents = dataset.document_index();
  for (size_t d = 0; d + 1 < documents.size(); ++d) {
    tokens.clear();
    for (int64_t q = documents[d]; q < documents[d + 1]; ++q) {
      const size_t seq = static_cast<size_t>(q);
      const size_t n = static_cast<size_t>(dataset.sequence_length(seq));
      tokens.resize(tokens.size() + n);
      dataset.read_tokens(seq, 0, n, tokens.data() + tokens.size() - n);
    }
    if (!tokens.empty() && eos >= 0 && tokens.back() == eos) tokens.pop_back();
    Result<std::string> text = tokenizer.decode(tokens);
    if (!text.ok()) {
      return text.status().with_context(dataset.prefix() + ": document " + std::to_string(d));
    }
    out.push_back(std::move(*text));
  }
  return out;
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

Result<std::vector<PromptExample>> read_prompt_datasets(const std::string& prompts_prefix,
                                                        const std::string& answers_prefix,
                                                        const data::Tokenizer& tokenizer) {
  MS_ASSIGN_OR_RETURN(const data::IndexedDataset prompt_set,
                      data::IndexedDataset::open(prompts_prefix));
  MS_ASSIGN_OR_RETURN(const data::IndexedDataset answer_set,
                      data::IndexedDataset::open(answers_prefix));
  if (prompt_set.num_documents() != answer_set.num_documents()) {
    return InvalidArgument(prompts_prefix + " holds " + std::to_string(prompt_set.num_documents()) +
                           " documents, " + answers_prefix + " " +
                           std::to_string(answer_set.num_documents()) +
                           ": the two must come from the same JSON lines");
  }
  MS_ASSIGN_OR_RETURN(std::vector<std::string> prompts, decode_documents(prompt_set, tokenizer));
  MS_ASSIGN_OR_RETURN(std::vector<std::string> answers, decode_documents(answer_set, tokenizer));
  if (prompts.empty()) return Corruption(prompts_prefix + ": no prompts");
  std::vector<PromptExample> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) {
      return Corruption(prompts_prefix + ": document " + std::to_string(i) + " is an empty prompt");
    }
    out[i] = {std::move(prompts[i]), std::move(answers[i])};
  }
  return out;
}

}  // namespace ms::rl
