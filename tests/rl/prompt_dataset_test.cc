// The prompt dataset reader: fields, compressed files, and errors naming file:line.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

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
