// Corpus readers: how .txt, .jsonl and .jsonl.zst files become documents, how inputs expand,
// and how malformed lines are reported or skipped.
#include "data/corpus.h"

#include <gtest/gtest.h>

#include "dataset_test_util.h"
#include "io/zstd_stream.h"

namespace ms::data {
namespace {

using testing::TempDir;
using testing::write_text;

std::vector<std::string> read_all(const std::string& path, const CorpusOptions& options = {},
                                  uint64_t* skipped = nullptr) {
  auto reader = DocumentReader::open(io::default_env(), path, options);
  EXPECT_TRUE(reader.ok()) << reader.status().to_string();
  std::vector<std::string> docs;
  if (!reader.ok()) return docs;
  std::string text;
  while (true) {
    Result<bool> got = (*reader)->next(&text);
    EXPECT_TRUE(got.ok()) << got.status().to_string();
    if (!got.ok() || !*got) break;
    docs.push_back(text);
  }
  if (skipped) *skipped = (*reader)->skipped_lines();
  return docs;
}

Status first_error(const std::string& path, const CorpusOptions& options = {}) {
  auto reader = DocumentReader::open(io::default_env(), path, options);
  if (!reader.ok()) return reader.status();
  std::string text;
  while (true) {
    Result<bool> got = (*reader)->next(&text);
    if (!got.ok()) return got.status();
    if (!*got) return Status::OK();
  }
}

const char kPlay[] = "First Citizen:\nBefore we proceed.\n\n\nAll:\nSpeak, speak.\n   \nEnd.";

TEST(TextCorpus, WholeFileIsOneDocumentByDefault) {
  TempDir dir;
  write_text(dir.file("a.txt"), kPlay);
  EXPECT_EQ(read_all(dir.file("a.txt")), std::vector<std::string>{kPlay});
}

TEST(TextCorpus, BlankLinesSeparateDocuments) {
  TempDir dir;
  write_text(dir.file("a.txt"), kPlay);
  CorpusOptions options;
  options.text_split = TextSplit::kBlankLine;
  EXPECT_EQ(read_all(dir.file("a.txt"), options),
            (std::vector<std::string>{"First Citizen:\nBefore we proceed.\n", "All:\nSpeak, speak.\n", "End."}));
}

TEST(TextCorpus, EveryNonEmptyLineCanBeADocument) {
  TempDir dir;
  write_text(dir.file("a.txt"), "one\n\ntwo\nthree");
  CorpusOptions options;
  options.text_split = TextSplit::kLine;
  EXPECT_EQ(read_all(dir.file("a.txt"), options), (std::vector<std::string>{"one", "two", "three"}));
}

TEST(TextCorpus, EmptyFileIsOneEmptyDocument) {
  TempDir dir;
  write_text(dir.file("a.txt"), "");
  EXPECT_EQ(read_all(dir.file("a.txt")), std::vector<std::string>{""});
}

TEST(TextCorpus, DocumentsLongerThanTheReadChunkStayWhole) {
  TempDir dir;
  const std::string big(3 << 20, 'x');
  write_text(dir.file("a.txt"), big + "\n\nsmall\n");
  CorpusOptions options;
  options.text_split = TextSplit::kBlankLine;
  std::vector<std::string> docs = read_all(dir.file("a.txt"), options);
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], big + "\n");
  EXPECT_EQ(docs[1], "small\n");
}

TEST(TextCorpus, ParsesSeparatorNames) {
  EXPECT_EQ(*parse_text_split("none"), TextSplit::kWholeFile);
  EXPECT_EQ(*parse_text_split("blank-line"), TextSplit::kBlankLine);
  EXPECT_EQ(*parse_text_split("line"), TextSplit::kLine);
  EXPECT_FALSE(parse_text_split("para").ok());
}

const char kJsonl[] =
    "{\"text\": \"alpha\", \"id\": 1}\n"
    "\n"
    "{\"id\": 2, \"text\": \"caf\\u00e9 \\n two lines\", \"body\": \"B\"}\r\n"
    "{\"text\": \"\"}";

TEST(JsonlCorpus, ReadsTheTextField) {
  TempDir dir;
  write_text(dir.file("a.jsonl"), kJsonl);
  EXPECT_EQ(read_all(dir.file("a.jsonl")),
            (std::vector<std::string>{"alpha", "caf\xc3\xa9 \n two lines", ""}));
}

TEST(JsonlCorpus, TextKeyIsConfigurable) {
  TempDir dir;
  write_text(dir.file("a.jsonl"), "{\"body\": \"x\"}\n{\"body\": \"y\"}\n");
  CorpusOptions options;
  options.text_key = "body";
  EXPECT_EQ(read_all(dir.file("a.jsonl"), options), (std::vector<std::string>{"x", "y"}));
}

TEST(JsonlCorpus, MalformedLineNamesFileAndLine) {
  TempDir dir;
  write_text(dir.file("a.jsonl"), "{\"text\": \"ok\"}\n\n{\"text\": \"cut\n{\"text\": 3}\n");
  Status s = first_error(dir.file("a.jsonl"));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("a.jsonl:3: malformed JSON"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("--skip-bad-lines"), std::string::npos);
}

TEST(JsonlCorpus, WrongShapesAreExplained) {
  EXPECT_NE(parse_jsonl_document("[1]", "text").status().message().find("expected a JSON object"), std::string::npos);
  EXPECT_NE(parse_jsonl_document("{\"t\":1}", "text").status().message().find("no key 'text'"), std::string::npos);
  EXPECT_NE(parse_jsonl_document("{\"text\":1}", "text").status().message().find("not a string"), std::string::npos);
  EXPECT_NE(parse_jsonl_document("{\"text\":\"\xff\"}", "text").status().message().find("malformed JSON"), std::string::npos);
  EXPECT_NE(parse_jsonl_document("{\"text\":\"a\", \"n\": 1e999999}", "text").status().message().find("unreadable JSON"), std::string::npos);
}

TEST(JsonlCorpus, BadLinesCanBeSkippedAndCounted) {
  TempDir dir;
  write_text(dir.file("a.jsonl"), "{\"text\": \"a\"}\nnot json\n{\"text\": 5}\n{\"text\": \"b\"}\n");
  CorpusOptions options;
  options.skip_bad_lines = true;
  uint64_t skipped = 0;
  EXPECT_EQ(read_all(dir.file("a.jsonl"), options, &skipped), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(skipped, 2u);
}

TEST(JsonlZstCorpus, StreamsTheSameDocumentsAsPlainJsonl) {
  TempDir dir;
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "{\"text\": \"document number " + std::to_string(i) + "\"}\n";
  write_text(dir.file("a.jsonl"), many);
  write_text(dir.file("a.jsonl.zst"), io::compress(many));
  std::vector<std::string> plain = read_all(dir.file("a.jsonl"));
  EXPECT_EQ(plain.size(), 5000u);
  EXPECT_EQ(read_all(dir.file("a.jsonl.zst")), plain);
}

TEST(JsonlZstCorpus, DamagedStreamIsCorruption) {
  TempDir dir;
  std::string packed = io::compress("{\"text\": \"a\"}\n");
  write_text(dir.file("a.jsonl.zst"), packed.substr(0, packed.size() - 3));
  Status s = first_error(dir.file("a.jsonl.zst"));
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.to_string();
  EXPECT_NE(s.message().find("a.jsonl.zst"), std::string::npos);
}

TEST(CorpusInputs, FormatsFollowExtensions) {
  EXPECT_EQ(*corpus_format("x/a.txt"), CorpusFormat::kText);
  EXPECT_EQ(*corpus_format("a.jsonl"), CorpusFormat::kJsonl);
  EXPECT_EQ(*corpus_format("a.jsonl.zst"), CorpusFormat::kJsonlZst);
  EXPECT_EQ(corpus_format("a.parquet").status().code(), StatusCode::kInvalidArgument);
}

TEST(CorpusInputs, DirectoriesAreSearchedRecursivelyInNameOrder) {
  TempDir dir;
  ASSERT_TRUE(io::default_env().create_dirs(dir.file("corpus/sub")).ok());
  for (const char* name : {"corpus/b.txt", "corpus/a.jsonl", "corpus/sub/c.jsonl.zst", "corpus/notes.md"}) {
    write_text(dir.file(name), "");
  }
  std::vector<std::string> inputs{dir.file("corpus")};
  auto files = expand_corpus_inputs(io::default_env(), inputs);
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  EXPECT_EQ(*files, (std::vector<std::string>{dir.file("corpus/a.jsonl"), dir.file("corpus/b.txt"),
                                              dir.file("corpus/sub/c.jsonl.zst")}));
}

TEST(CorpusInputs, GlobsExpandSortedAndArgumentsKeepTheirOrder) {
  TempDir dir;
  for (const char* name : {"p2.txt", "p1.txt", "z.jsonl"}) write_text(dir.file(name), "");
  std::vector<std::string> inputs{dir.file("z.jsonl"), dir.file("p*.txt")};
  auto files = expand_corpus_inputs(io::default_env(), inputs);
  ASSERT_TRUE(files.ok()) << files.status().to_string();
  EXPECT_EQ(*files, (std::vector<std::string>{dir.file("z.jsonl"), dir.file("p1.txt"), dir.file("p2.txt")}));
}

TEST(CorpusInputs, NothingToReadIsAnError) {
  TempDir dir;
  write_text(dir.file("a.csv"), "");
  std::vector<std::string> missing{dir.file("none.txt")};
  EXPECT_EQ(expand_corpus_inputs(io::default_env(), missing).status().code(), StatusCode::kNotFound);
  std::vector<std::string> pattern{dir.file("*.jsonl")};
  EXPECT_EQ(expand_corpus_inputs(io::default_env(), pattern).status().code(), StatusCode::kNotFound);
  std::vector<std::string> wrong{dir.file("a.csv")};
  EXPECT_EQ(expand_corpus_inputs(io::default_env(), wrong).status().code(), StatusCode::kInvalidArgument);
  std::vector<std::string> empty_dir{dir.path()};
  EXPECT_EQ(expand_corpus_inputs(io::default_env(), empty_dir).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ms::data
