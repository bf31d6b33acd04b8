// The prompt dataset reader: fields, compressed files, and errors naming file:line.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "io/zstd_stream.h"
#include "rl/prompt_dataset.h"
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

}  // namespace
}  // namespace ms::rl
