// The prompt dataset reader: fields, compressed files, and errors naming file:line; ms-data
// dataset pairs of prompts and answers against the JSON lines they were built from.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "data/dataset_builder.h"
#include "io/atomic_file.h"
#include "io/env.h"
#include "io/zstd_stream.h"
#include "rl/prompt_dataset.h"
#include "rl/rewards.h"
#include "tests/io/temp_dir.h"

namespace ms::rl {
namespace {

TEST(PromptDataset, ParsesPromptsAndAnswers) {
  Result<std::vector<PromptExample>> r = parse_prompt_lines(
      "{\"prompt\": \"How many?\", \"answer\": \"34\", \"id\": 1}\n\n"
      "{\"prompt\": \"And now?\", \"answer\": -2}\n",
      "p.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].prompt, "How many?");
  EXPECT_EQ((*r)[0].answer, "34");
  EXPECT_EQ((*r)[1].answer, "-2");
}

std::string error_of(const std::string& text) {
  Result<std::vector<PromptExample>> r = parse_prompt_lines(text, "p.jsonl");
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : r.status().message();
}

TEST(PromptDataset, ErrorsNameFileAndLine) {
  const std::string ok = "{\"prompt\": \"a\", \"answer\": \"1\"}\n";
  EXPECT_EQ(error_of(ok + "{\"prompt\": \"b\"\n"), "p.jsonl:2: not valid JSON");
  EXPECT_EQ(error_of(ok + ok + "{\"prompt\": \"b\"}\n"),
            "p.jsonl:3: missing field 'answer' (a string or a number)");
  EXPECT_EQ(error_of("{\"prompt\": 3, \"answer\": \"1\"}"), "p.jsonl:1: missing string field 'prompt'");
  EXPECT_EQ(error_of("[1]"), "p.jsonl:1: expected a JSON object");
  EXPECT_EQ(error_of("{\"prompt\": \"\", \"answer\": \"1\"}"), "p.jsonl:1: empty 'prompt'");
  EXPECT_EQ(error_of("\n\n"), "p.jsonl: no prompts");
}

TEST(PromptDataset, ReadsPlainAndCompressedFiles) {
  io::testing::TempDir dir;
  const std::string text = "{\"prompt\": \"a\", \"answer\": \"1\"}\n{\"prompt\": \"b\", \"answer\": \"2\"}\n";
  std::ofstream(dir.file("p.jsonl")) << text;
  std::ofstream(dir.file("p.jsonl.zst"), std::ios::binary) << io::compress(text);
  for (const char* name : {"p.jsonl", "p.jsonl.zst"}) {
    Result<std::vector<PromptExample>> r = read_prompt_dataset(dir.file(name));
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    ASSERT_EQ(r->size(), 2u);
    EXPECT_EQ((*r)[1].answer, "2");
  }
  std::ofstream(dir.file("bad.jsonl")) << text << "oops\n";
  Result<std::vector<PromptExample>> bad = read_prompt_dataset(dir.file("bad.jsonl"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), dir.file("bad.jsonl") + ":3: not valid JSON");
  EXPECT_FALSE(read_prompt_dataset(dir.file("missing.jsonl")).ok());
}

// `ms-data build --text-key prompt` and `--text-key answer` of the same JSON lines read back as
// the JSON lines themselves (multi-byte text and a numeric answer included); a pair of
// different lengths, another tokenizer's dataset, and a missing dataset are refused.
TEST(PromptDataset, DatasetPairEqualsItsJsonLines) {
  io::testing::TempDir dir;
  const std::string text =
      "{\"prompt\": \"Mia has 14 apples. How many?\", \"answer\": \"14\"}\n"
      "{\"prompt\": \"Caf\u00e9 \u00fcber alles?\", \"answer\": \"-3\"}\n"
      "{\"prompt\": \"  spaced  \", \"answer\": \" 7 \"}\n";
  std::ofstream(dir.file("p.jsonl")) << text;
  std::ofstream(dir.file("short.jsonl")) << "{\"prompt\": \"a\", \"answer\": \"1\"}\n";
  const std::string gpt2 = std::string(MS_RL_TEST_SOURCE_DIR) + "/data/tokenizers/gpt2/tokenizer.json";
  auto tokenizer = data::Tokenizer::load(gpt2);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  const auto build = [&](const std::string& input, const std::string& key,
                         const std::string& prefix) {
    data::BuildOptions options;
    options.inputs = {dir.file(input)};
    options.tokenizer_path = gpt2;
    options.output_prefix = dir.file(prefix);
    options.corpus.text_key = key;
    options.show_progress = false;
    Result<data::BuildResult> r = data::build_dataset(io::default_env(), **tokenizer, options, nullptr);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
  };
  build("p.jsonl", "prompt", "prompts");
  build("p.jsonl", "answer", "answers");
  build("short.jsonl", "answer", "short");
  Result<std::vector<PromptExample>> lines = read_prompt_dataset(dir.file("p.jsonl"));
  Result<std::vector<PromptExample>> pair =
      read_prompt_datasets(dir.file("prompts"), dir.file("answers"), **tokenizer);
  ASSERT_TRUE(lines.ok());
  ASSERT_TRUE(pair.ok()) << pair.status().to_string();
  ASSERT_EQ(pair->size(), lines->size());
  for (size_t i = 0; i < lines->size(); ++i) {
    EXPECT_EQ((*pair)[i].prompt, (*lines)[i].prompt) << i;
    EXPECT_EQ((*pair)[i].answer, (*lines)[i].answer) << i;
  }
  Result<std::vector<PromptExample>> uneven =
      read_prompt_datasets(dir.file("prompts"), dir.file("short"), **tokenizer);
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("holds 3 documents"), std::string::npos)
      << uneven.status().to_string();
  // The sidecar says another tokenizer built it.
  Result<std::string> meta = io::read_file(dir.file("answers.meta.json"));
  ASSERT_TRUE(meta.ok());
  const std::string hash = (*tokenizer)->content_hash();
  const size_t at = meta->find(hash);
  ASSERT_NE(at, std::string::npos);
  std::string other = *meta;
  other.replace(at, hash.size(), std::string(hash.size(), '0'));
  std::ofstream(dir.file("answers.meta.json"), std::ios::trunc) << other;
  Result<std::vector<PromptExample>> foreign =
      read_prompt_datasets(dir.file("prompts"), dir.file("answers"), **tokenizer);
  ASSERT_FALSE(foreign.ok());
  EXPECT_NE(foreign.status().message().find("not the actor's"), std::string::npos)
      << foreign.status().to_string();
  EXPECT_EQ(read_prompt_datasets(dir.file("none"), dir.file("answers"), **tokenizer).status().code(),
            StatusCode::kNotFound);
}

// The arithmetic prompt files from data/corpus/make_arithmetic_prompts.sh: both read, every
// answer an integer, the held-out split disjoint from the training prompts.
TEST(PromptDataset, ArithmeticSplitIsDisjointAndReadable) {
  io::testing::TempDir dir;
  const char* root = std::getenv("MS_SOURCE_DIR");
  const std::string script =
      std::string(root ? root : MS_RL_TEST_SOURCE_DIR) + "/data/corpus/make_arithmetic_prompts.sh";
  const std::string command = "bash " + script + " " + dir.path() + " 300 4242 2>/dev/null";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  Result<std::vector<PromptExample>> train =
      read_prompt_dataset(dir.file("arithmetic_prompts_train.jsonl"));
  Result<std::vector<PromptExample>> heldout =
      read_prompt_dataset(dir.file("arithmetic_prompts_heldout.jsonl"));
  ASSERT_TRUE(train.ok()) << train.status().to_string();
  ASSERT_TRUE(heldout.ok()) << heldout.status().to_string();
  EXPECT_EQ(train->size(), 3000u);
  EXPECT_EQ(heldout->size(), 300u);
  std::set<std::string> seen;
  for (const PromptExample& e : *train) {
    seen.insert(e.prompt);
    ASSERT_TRUE(answer_matches(e.answer, e.answer).ok()) << e.answer;
  }
  std::set<std::string> held;
  for (const PromptExample& e : *heldout) {
    EXPECT_EQ(seen.count(e.prompt), 0u) << "held-out prompt also in training: " << e.prompt;
    EXPECT_TRUE(held.insert(e.prompt).second) << "held-out prompt twice: " << e.prompt;
    EXPECT_NE(e.prompt.find("How many"), std::string::npos);
    ASSERT_TRUE(answer_matches(e.answer, e.answer).ok()) << e.answer;
  }
  // The same seed writes the same file; the training prompts are the bundled corpus's stories.
  EXPECT_EQ((*train)[0].prompt,
            "Mia has 35 plums. Then Mia eats 8. Then Mia buys 5 more. Then Mia wins 2 more. How "
            "many plums does Mia have now?");
  EXPECT_EQ((*train)[0].answer, "34");
}

}  // namespace
}  // namespace ms::rl
