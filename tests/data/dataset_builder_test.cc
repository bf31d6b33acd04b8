// build_dataset end to end on small corpora with a byte tokenizer (id = byte, end-of-document
// 256), so every expected token is visible in the test; plus inspect/verify statistics.
#include "data/dataset_builder.h"

#include <gtest/gtest.h>

#include <cmath>

#include "data/indexed_dataset.h"
#include "data/indexed_dataset_stats.h"
#include "dataset_test_util.h"
#include "io/zstd_stream.h"

namespace ms::data {
namespace {

using testing::ByteTokenizer;
using testing::read_text;
using testing::TempDir;
using testing::write_text;

std::vector<int32_t> document(const IndexedDataset& ds, size_t doc) {
  const size_t seq = static_cast<size_t>(ds.document_index()[doc]);
  std::vector<int32_t> out(static_cast<size_t>(ds.sequence_length(seq)));
  ds.read_tokens(seq, 0, out.size(), out.data());
  return out;
}

std::vector<int32_t> bytes_then_eos(std::string_view text) {
  std::vector<int32_t> ids(text.begin(), text.end());
  ids.push_back(256);
  return ids;
}

class BuildDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir_.file("play.txt"), "Para one.\n\nPara two.\n");
    write_text(dir_.file("docs.jsonl"), "{\"text\": \"jx\"}\n{\"text\": \"jy\"}\n");
    options_.inputs = {dir_.file("play.txt"), dir_.file("docs.jsonl")};
    options_.tokenizer_path = "bytes.json";
    options_.output_prefix = dir_.file("out");
    options_.corpus.text_split = TextSplit::kBlankLine;
    options_.show_progress = false;
    // Most cases rebuild into the same prefix; the refusal without it has its own case.
    options_.replace = true;
  }
  Result<BuildResult> build(const Tokenizer& tok) {
    return build_dataset(io::default_env(), tok, options_, nullptr);
  }
  TempDir dir_;
  BuildOptions options_;
  ByteTokenizer tokenizer_;
};

TEST_F(BuildDataset, WritesDocumentsInInputOrderWithEndOfDocument) {
  auto result = build(tokenizer_);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  ASSERT_EQ(ds->num_documents(), 4u);
  EXPECT_EQ(ds->num_sequences(), 4u);
  EXPECT_EQ(ds->dtype_code(), static_cast<uint8_t>(TokenDType::kU16));
  EXPECT_EQ(document(*ds, 0), bytes_then_eos("Para one.\n"));
  EXPECT_EQ(document(*ds, 1), bytes_then_eos("Para two.\n"));
  EXPECT_EQ(document(*ds, 2), bytes_then_eos("jx"));
  EXPECT_EQ(document(*ds, 3), bytes_then_eos("jy"));
}

TEST_F(BuildDataset, SidecarDescribesTokenizerAndSources) {
  ASSERT_TRUE(build(tokenizer_).ok());
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok());
  ASSERT_TRUE(ds->meta().has_value());
  const DatasetMeta& meta = *ds->meta();
  EXPECT_EQ(meta.tokenizer_path, "bytes.json");
  EXPECT_EQ(meta.tokenizer_hash, "bytes-257");
  EXPECT_EQ(meta.tokenizer_kind, "test-bytes");
  EXPECT_EQ(meta.vocab_size, 257);
  EXPECT_EQ(meta.eos_id, 256);
  EXPECT_TRUE(meta.append_eos);
  ASSERT_EQ(meta.sources.size(), 2u);
  EXPECT_EQ(meta.sources[0].documents, 2u);
  EXPECT_EQ(meta.sources[0].bytes, 21u);
  EXPECT_EQ(meta.sources[0].tokens, 22u);
  EXPECT_EQ(meta.sources[1].documents, 2u);
  EXPECT_EQ(meta.sources[1].tokens, 6u);
  EXPECT_EQ(meta.tokens, 28u);
}

TEST_F(BuildDataset, ThreadCountAndBatchingDoNotChangeTheBytes) {
  std::string many;
  for (int i = 0; i < 300; ++i) many += "{\"text\": \"doc " + std::to_string(i * 7919) + "\"}\n";
  write_text(dir_.file("many.jsonl.zst"), io::compress(many));
  options_.inputs.push_back(dir_.file("many.jsonl.zst"));
  ASSERT_TRUE(build(tokenizer_).ok());
  const std::string idx1 = read_text(options_.output_prefix + ".idx");
  const std::string bin1 = read_text(options_.output_prefix + ".bin");
  options_.threads = 3;
  options_.batch_documents = 7;
  options_.output_prefix = dir_.file("out3");
  ASSERT_TRUE(build(tokenizer_).ok());
  EXPECT_EQ(read_text(options_.output_prefix + ".idx"), idx1);
  EXPECT_EQ(read_text(options_.output_prefix + ".bin"), bin1);
}

// An existing dataset is replaced only when asked, and an output that is an input (here the
// tokenizer's path) is refused before anything is written.
TEST_F(BuildDataset, AnExistingOrInputOutputIsRefused) {
  ASSERT_TRUE(build(tokenizer_).ok());
  const std::string bin = read_text(options_.output_prefix + ".bin");
  options_.replace = false;
  Result<BuildResult> again = build(tokenizer_);
  EXPECT_EQ(again.status().code(), StatusCode::kAlreadyExists) << again.status().to_string();
  EXPECT_NE(again.status().message().find("out.bin already exists"), std::string::npos)
      << again.status().message();
  options_.replace = true;
  options_.tokenizer_path = options_.output_prefix + ".meta.json";
  Result<BuildResult> onto = build(tokenizer_);
  EXPECT_EQ(onto.status().code(), StatusCode::kInvalidArgument) << onto.status().to_string();
  EXPECT_NE(onto.status().message().find("is the input " + options_.tokenizer_path),
            std::string::npos) << onto.status().message();
  EXPECT_EQ(read_text(options_.output_prefix + ".bin"), bin);
}

TEST_F(BuildDataset, CreatesTheDirectoriesOfANewPrefix) {
  options_.output_prefix = dir_.file("new/deeper/out");
  auto result = build(tokenizer_);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->num_documents(), 4u);
}

TEST_F(BuildDataset, EndOfDocumentCanBeLeftOut) {
  options_.append_eos = false;
  ASSERT_TRUE(build(tokenizer_).ok());
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(document(*ds, 2), (std::vector<int32_t>{'j', 'x'}));
  EXPECT_FALSE(ds->meta()->append_eos);
}

// Megatron's preprocess_data.py writes an empty text as a document with no sequence and no
// end-of-document token (its add_document gets no ids and no lengths); so does ms-data, with or
// without --no-append-eos.
TEST_F(BuildDataset, EmptyDocumentHasNoSequenceAndNoEndOfDocument) {
  write_text(dir_.file("gaps.jsonl"), "{\"text\": \"ab\"}\n{\"text\": \"\"}\n{\"text\": \"c\"}\n");
  options_.inputs = {dir_.file("gaps.jsonl")};
  for (bool append_eos : {true, false}) {
    options_.append_eos = append_eos;
    auto result = build(tokenizer_);
    ASSERT_TRUE(result.ok()) << result.status().to_string();
    EXPECT_EQ(result->meta.documents, 3u);
    EXPECT_EQ(result->meta.sequences, 2u);
    auto ds = IndexedDataset::open(options_.output_prefix);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    EXPECT_EQ(ds->num_documents(), 3u);
    EXPECT_EQ(ds->num_sequences(), 2u);
    const std::vector<int64_t> index(ds->document_index().begin(), ds->document_index().end());
    EXPECT_EQ(index, (std::vector<int64_t>{0, 1, 1, 2}));
    EXPECT_EQ(ds->total_tokens(), append_eos ? 5u : 3u);
    EXPECT_EQ(compute_dataset_stats(*ds).min_document_tokens, 0u);
  }
}

TEST(IndexedDatasetWriter, EmptyDocumentAddsNoSequence) {
  TempDir dir;
  auto writer = IndexedDatasetWriter::create(dir.file("d"), static_cast<uint8_t>(TokenDType::kU16));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{}).ok());
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{4}).ok());
  ASSERT_TRUE((*writer)->finish(DatasetMeta{}).ok());
  EXPECT_EQ(read_text(dir.file("d.idx")),
            encode_index(static_cast<uint8_t>(TokenDType::kU16), std::vector<int32_t>{1},
                         std::vector<int64_t>{0, 0, 1}));
}

TEST_F(BuildDataset, DtypeFollowsTheVocabularyOrTheRequest) {
  ByteTokenizer large(70000, 69999);
  ASSERT_TRUE(build(large).ok());
  EXPECT_EQ(IndexedDataset::open(options_.output_prefix)->dtype_code(), static_cast<uint8_t>(TokenDType::kI32));
  options_.dtype = DTypeChoice::kU16;
  auto refused = build(large);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("70000"), std::string::npos);
  options_.dtype = DTypeChoice::kI32;
  ASSERT_TRUE(build(tokenizer_).ok());
  EXPECT_EQ(IndexedDataset::open(options_.output_prefix)->dtype_code(), static_cast<uint8_t>(TokenDType::kI32));
  EXPECT_EQ(*parse_dtype_choice("auto"), DTypeChoice::kAuto);
  EXPECT_FALSE(parse_dtype_choice("u8").ok());
}

TEST_F(BuildDataset, MalformedLineFailsAndLeavesNoDataset) {
  write_text(dir_.file("docs.jsonl"), "{\"text\": \"ok\"}\n{oops}\n");
  auto result = build(tokenizer_);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("docs.jsonl:2"), std::string::npos) << result.status().message();
  EXPECT_FALSE(io::default_env().exists(options_.output_prefix + ".idx"));
  EXPECT_FALSE(io::default_env().exists(options_.output_prefix + ".bin"));
}

TEST_F(BuildDataset, SkippedLinesAreCountedInTheSidecar) {
  write_text(dir_.file("docs.jsonl"), "{\"text\": \"ok\"}\n{oops}\n");
  options_.corpus.skip_bad_lines = true;
  auto result = build(tokenizer_);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ(result->meta.sources[1].skipped_lines, 1u);
  EXPECT_EQ(IndexedDataset::open(options_.output_prefix)->meta()->sources[1].skipped_lines, 1u);
}

TEST_F(BuildDataset, TokenizerWithoutEndOfDocumentNeedsNoAppend) {
  ByteTokenizer no_eos(256, -1);
  EXPECT_EQ(build(no_eos).status().code(), StatusCode::kInvalidArgument);
  options_.append_eos = false;
  EXPECT_TRUE(build(no_eos).ok());
}

TEST_F(BuildDataset, BuildsWithTheGpt2TokenizerWhenPresent) {
  const char* root = std::getenv("MS_SOURCE_DIR");
  const std::string path = std::string(root ? root : ".") + "/data/tokenizers/gpt2/tokenizer.json";
  if (!io::default_env().exists(path)) GTEST_SKIP() << path << " is not in this checkout";
  auto tok = Tokenizer::load(path);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  options_.tokenizer_path = path;
  ASSERT_TRUE(build(**tok).ok());
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->dtype_code(), static_cast<uint8_t>(TokenDType::kU16));
  std::vector<int32_t> ids = document(*ds, 2);
  EXPECT_EQ(ids.back(), 50256);
  ids.pop_back();
  EXPECT_EQ(*(*tok)->decode(ids), "jx");
}

TEST(DatasetStats, HistogramUsesLog2Buckets) {
  TempDir dir;
  auto writer = IndexedDatasetWriter::create(dir.file("d"), 8);
  ASSERT_TRUE(writer.ok());
  for (size_t length : {0, 1, 2, 3, 4, 9}) {
    ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>(length, 1)).ok());
  }
  ASSERT_TRUE((*writer)->finish(DatasetMeta{}).ok());
  auto ds = IndexedDataset::open(dir.file("d"));
  ASSERT_TRUE(ds.ok());
  DatasetStats stats = compute_dataset_stats(*ds);
  EXPECT_EQ(stats.documents, 6u);
  EXPECT_EQ(stats.tokens, 19u);
  EXPECT_EQ(stats.min_document_tokens, 0u);
  EXPECT_EQ(stats.max_document_tokens, 9u);
  ASSERT_EQ(stats.histogram.size(), 5u);  // [0], [1], [2,3], [4,7], [8,15]
  EXPECT_EQ(stats.histogram[2].lo, 2u);
  EXPECT_EQ(stats.histogram[2].hi, 3u);
  EXPECT_EQ(stats.histogram[2].count, 2u);
  EXPECT_EQ(stats.histogram[3].count, 1u);
  EXPECT_EQ(stats.histogram[4].count, 1u);
}

class VerifyDataset : public BuildDataset {};

TEST_F(VerifyDataset, AcceptsAGoodBuildUsingTheSidecarVocabulary) {
  ASSERT_TRUE(build(tokenizer_).ok());
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok());
  auto report = verify_dataset(*ds, VerifyOptions{});
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->vocab_size, 257);
  EXPECT_EQ(report->tokens_checked, 28u);
}

TEST_F(VerifyDataset, NamesTheFirstIdOutsideTheVocabulary) {
  ASSERT_TRUE(build(tokenizer_).ok());
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok());
  VerifyOptions options;
  options.vocab_size = 256;  // the end-of-document id 256 no longer fits
  auto report = verify_dataset(*ds, options);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("sequence 0 (document 0) position 10 holds token id 256"),
            std::string::npos) << report.status().message();
}

TEST_F(VerifyDataset, RefusesTrailingBytesAndAForeignTokenizer) {
  ASSERT_TRUE(build(tokenizer_).ok());
  {
    auto ds = IndexedDataset::open(options_.output_prefix);
    ASSERT_TRUE(ds.ok());
    VerifyOptions options;
    options.tokenizer_hash = "other";
    EXPECT_NE(verify_dataset(*ds, options).status().message().find("do not belong together"), std::string::npos);
  }
  write_text(options_.output_prefix + ".bin", read_text(options_.output_prefix + ".bin") + "xx");
  auto ds = IndexedDataset::open(options_.output_prefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_NE(verify_dataset(*ds, VerifyOptions{}).status().message().find("trailing bytes"), std::string::npos);
}

// Ids 1, 1, 2, 3 (and an empty document): p = 1/2, 1/4, 1/4, so H = 1.5 bits = 1.5 ln 2 nats.
TEST(UnigramStats, EntropyOfTheTokenFrequencies) {
  TempDir dir;
  auto writer = IndexedDatasetWriter::create(dir.file("u"), static_cast<uint8_t>(TokenDType::kU16));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{1, 2}).ok());
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{}).ok());
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{3, 1}).ok());
  ASSERT_TRUE((*writer)->finish(DatasetMeta{}).ok());
  auto ds = IndexedDataset::open(dir.file("u"));
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  const UnigramStats u = compute_unigram_stats(*ds);
  EXPECT_EQ(u.tokens, 4u);
  EXPECT_EQ(u.distinct_ids, 3u);
  EXPECT_NEAR(u.entropy_nats, 1.5 * std::log(2.0), 1e-12);
}

}  // namespace
}  // namespace ms::data
