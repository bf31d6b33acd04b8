// The Megatron indexed format, specified by bytes written out by hand from the published layout
// (megatron/core/datasets/indexed_dataset.py: _IndexWriter / _IndexReader): what our writer must
// produce, what our reader must accept, and every way a damaged file must be refused.
#include "data/indexed_dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_test_util.h"
#include "io/fault_env.h"

namespace ms::data {
namespace {

using testing::read_text;
using testing::TempDir;
using testing::write_text;

// Three documents, one sequence each, u16: [1, 2, 3], [258], [7, 65535].
const std::string kThreeDocIdx(
    "MMIDIDX\x00\x00"                     // magic
    "\x01\x00\x00\x00\x00\x00\x00\x00"    // version 1 (u64)
    "\x08"                                // dtype code 8 = u16
    "\x03\x00\x00\x00\x00\x00\x00\x00"    // 3 sequences (u64)
    "\x04\x00\x00\x00\x00\x00\x00\x00"    // 4 document-index entries (u64)
    "\x03\x00\x00\x00" "\x01\x00\x00\x00" "\x02\x00\x00\x00"   // lengths (i32)
    "\x00\x00\x00\x00\x00\x00\x00\x00"    // pointers (i64, bytes): 0
    "\x06\x00\x00\x00\x00\x00\x00\x00"    //   6 = 3 tokens * 2 bytes
    "\x08\x00\x00\x00\x00\x00\x00\x00"    //   8
    "\x00\x00\x00\x00\x00\x00\x00\x00"    // document index (i64): 0
    "\x01\x00\x00\x00\x00\x00\x00\x00"    //   1
    "\x02\x00\x00\x00\x00\x00\x00\x00"    //   2
    "\x03\x00\x00\x00\x00\x00\x00\x00",   //   3
    34 + 3 * 4 + 3 * 8 + 4 * 8);
const std::string kThreeDocBin("\x01\x00\x02\x00\x03\x00" "\x02\x01" "\x07\x00\xff\xff", 12);

// Two documents in i32: document 0 has two sequences ([5, 6] and [7]), document 1 has [8].
const std::string kMultiSequenceIdx(
    "MMIDIDX\x00\x00"
    "\x01\x00\x00\x00\x00\x00\x00\x00"
    "\x04"                                // dtype code 4 = i32
    "\x03\x00\x00\x00\x00\x00\x00\x00"
    "\x03\x00\x00\x00\x00\x00\x00\x00"
    "\x02\x00\x00\x00" "\x01\x00\x00\x00" "\x01\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x08\x00\x00\x00\x00\x00\x00\x00"
    "\x0c\x00\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00"
    "\x02\x00\x00\x00\x00\x00\x00\x00"
    "\x03\x00\x00\x00\x00\x00\x00\x00",
    34 + 3 * 4 + 3 * 8 + 3 * 8);
const std::string kMultiSequenceBin("\x05\x00\x00\x00\x06\x00\x00\x00\x07\x00\x00\x00\x08\x00\x00\x00", 16);

std::vector<int32_t> sequence(const IndexedDataset& ds, size_t seq) {
  std::vector<int32_t> out(static_cast<size_t>(ds.sequence_length(seq)));
  ds.read_tokens(seq, 0, out.size(), out.data());
  return out;
}

Status finish_three_docs(IndexedDatasetWriter& writer) {
  MS_RETURN_IF_ERROR(writer.add_document(std::vector<int32_t>{1, 2, 3}));
  MS_RETURN_IF_ERROR(writer.add_document(std::vector<int32_t>{258}));
  MS_RETURN_IF_ERROR(writer.add_document(std::vector<int32_t>{7, 65535}));
  return writer.finish(DatasetMeta{});
}

TEST(IndexedDatasetWriter, WritesMegatronBytesExactly) {
  TempDir dir;
  const std::string prefix = dir.file("three");
  auto writer = IndexedDatasetWriter::create(prefix, static_cast<uint8_t>(TokenDType::kU16));
  ASSERT_TRUE(writer.ok()) << writer.status().to_string();
  ASSERT_TRUE(finish_three_docs(**writer).ok());
  EXPECT_EQ(read_text(prefix + ".idx"), kThreeDocIdx);
  EXPECT_EQ(read_text(prefix + ".bin"), kThreeDocBin);
  EXPECT_EQ(encode_index(8, std::vector<int32_t>{3, 1, 2}, std::vector<int64_t>{0, 1, 2, 3}), kThreeDocIdx);
}

TEST(IndexedDatasetWriter, WritesSeveralSequencesPerDocument) {
  TempDir dir;
  const std::string prefix = dir.file("multi");
  auto writer = IndexedDatasetWriter::create(prefix, static_cast<uint8_t>(TokenDType::kI32));
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->add_sequence(std::vector<int32_t>{5, 6}).ok());
  ASSERT_TRUE((*writer)->add_sequence(std::vector<int32_t>{7}).ok());
  (*writer)->end_document();
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{8}).ok());
  ASSERT_TRUE((*writer)->finish(DatasetMeta{}).ok());
  EXPECT_EQ(read_text(prefix + ".idx"), kMultiSequenceIdx);
  EXPECT_EQ(read_text(prefix + ".bin"), kMultiSequenceBin);
}

TEST(IndexedDatasetWriter, SidecarRecordsCountsAndDtype) {
  TempDir dir;
  const std::string prefix = dir.file("three");
  auto writer = IndexedDatasetWriter::create(prefix, 8);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(finish_three_docs(**writer).ok());
  auto meta = read_dataset_meta(io::default_env(), prefix + ".meta.json");
  ASSERT_TRUE(meta.ok()) << meta.status().to_string();
  EXPECT_EQ(meta->documents, 3u);
  EXPECT_EQ(meta->sequences, 3u);
  EXPECT_EQ(meta->tokens, 6u);
  EXPECT_EQ(meta->dtype, "u16");
  EXPECT_FALSE(meta->toolkit_version.empty());
}

TEST(IndexedDatasetWriter, RefusesTokensThatDoNotFitTheDtype) {
  TempDir dir;
  auto writer = IndexedDatasetWriter::create(dir.file("x"), 8);
  ASSERT_TRUE(writer.ok());
  Status s = (*writer)->add_document(std::vector<int32_t>{1, 65536});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("65536"), std::string::npos) << s.message();
  EXPECT_EQ((*writer)->add_document(std::vector<int32_t>{-1}).code(), StatusCode::kInvalidArgument);
}

TEST(IndexedDatasetWriter, RefusesNonTokenDtypes) {
  TempDir dir;
  EXPECT_EQ(IndexedDatasetWriter::create(dir.file("x"), 7).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexedDatasetWriter::create(dir.file("x"), 9).status().code(), StatusCode::kInvalidArgument);
}

TEST(IndexedDatasetWriter, InterruptedBuildLeavesNoIndex) {
  TempDir dir;
  const std::string prefix = dir.file("broken");
  io::FaultInjectingEnv env(io::default_env());
  auto writer = IndexedDatasetWriter::create(env, prefix, 8);
  ASSERT_TRUE(writer.ok());
  env.fail_nth_write(1);
  EXPECT_FALSE(finish_three_docs(**writer).ok());
  writer->reset();
  EXPECT_FALSE(io::default_env().exists(prefix + ".idx"));
  EXPECT_FALSE(io::default_env().exists(prefix + ".bin"));
  EXPECT_TRUE(io::default_env().list_dir(dir.path())->empty()) << "temporary files were left behind";
}

TEST(IndexedDatasetWriter, FailedRenameLeavesNoIndex) {
  TempDir dir;
  const std::string prefix = dir.file("broken");
  io::FaultInjectingEnv env(io::default_env());
  auto writer = IndexedDatasetWriter::create(env, prefix, 8);
  ASSERT_TRUE(writer.ok());
  env.fail_rename(true);
  EXPECT_FALSE(finish_three_docs(**writer).ok());
  writer->reset();
  EXPECT_FALSE(io::default_env().exists(prefix + ".idx"));
  EXPECT_FALSE(IndexedDataset::open(prefix).ok());
}

TEST(IndexedDatasetWriter, AbandonedWriterLeavesNothing) {
  TempDir dir;
  {
    auto writer = IndexedDatasetWriter::create(dir.file("gone"), 8);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{1, 2}).ok());
  }
  EXPECT_TRUE(io::default_env().list_dir(dir.path())->empty());
}

TEST(IndexedDatasetWriter, RebuildReplacesAnOlderDataset) {
  TempDir dir;
  const std::string prefix = dir.file("d");
  auto first = IndexedDatasetWriter::create(prefix, 8);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(finish_three_docs(**first).ok());
  auto second = IndexedDatasetWriter::create(prefix, 8);
  ASSERT_TRUE(second.ok());
  ASSERT_TRUE((*second)->add_document(std::vector<int32_t>{9}).ok());
  ASSERT_TRUE((*second)->finish(DatasetMeta{}).ok());
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->num_documents(), 1u);
  EXPECT_EQ(sequence(*ds, 0), std::vector<int32_t>{9});
}

class IndexedDatasetOpen : public ::testing::Test {
 protected:
  // Writes the given files under prefix "d" and opens them.
  Result<IndexedDataset> open_with(const std::string& idx, const std::string& bin) {
    write_text(prefix() + ".idx", idx);
    write_text(prefix() + ".bin", bin);
    return IndexedDataset::open(prefix());
  }
  std::string prefix() const { return dir_.file("d"); }
  // Expects Corruption whose message holds every fragment.
  void expect_corrupt(const Result<IndexedDataset>& r, std::initializer_list<std::string> fragments) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().to_string();
    for (const std::string& f : fragments) {
      EXPECT_NE(r.status().message().find(f), std::string::npos)
          << "'" << f << "' missing from: " << r.status().message();
    }
  }
  TempDir dir_;
};

// A .bin truncated while mapped (another job rebuilding the dataset in place): the read ends the
// process with an error naming the file and exit status 1, as the tools' errors do, not SIGBUS.
TEST_F(IndexedDatasetOpen, BinTruncatedWhileMappedIsAnErrorNamingIt) {
  auto ds = open_with(kThreeDocIdx, kThreeDocBin);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  ASSERT_EQ(::truncate((prefix() + ".bin").c_str(), 0), 0);
  EXPECT_EXIT((void)sequence(*ds, 2), ::testing::ExitedWithCode(1),
              "error: .*/d\\.bin was truncated or changed while mapped");
}

TEST_F(IndexedDatasetOpen, ReadsHandWrittenMegatronFiles) {
  auto ds = open_with(kThreeDocIdx, kThreeDocBin);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->num_sequences(), 3u);
  EXPECT_EQ(ds->num_documents(), 3u);
  EXPECT_EQ(ds->dtype_code(), 8);
  EXPECT_EQ(ds->total_tokens(), 6u);
  EXPECT_EQ(sequence(*ds, 0), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(sequence(*ds, 1), (std::vector<int32_t>{258}));
  EXPECT_EQ(sequence(*ds, 2), (std::vector<int32_t>{7, 65535}));
  int32_t middle = 0;
  ds->read_tokens(0, 1, 1, &middle);
  EXPECT_EQ(middle, 2);
  EXPECT_EQ(std::vector<int64_t>(ds->document_index().begin(), ds->document_index().end()),
            (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(ds->content_hash().size(), 24u);
  EXPECT_FALSE(ds->meta().has_value());
}

TEST_F(IndexedDatasetOpen, ReadsSeveralSequencesPerDocument) {
  auto ds = open_with(kMultiSequenceIdx, kMultiSequenceBin);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->num_documents(), 2u);
  EXPECT_EQ(ds->num_sequences(), 3u);
  EXPECT_EQ(sequence(*ds, 0), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(sequence(*ds, 2), (std::vector<int32_t>{8}));
  EXPECT_EQ(ds->document_index()[1], 2);
}

TEST_F(IndexedDatasetOpen, HashChangesWithTheIndex) {
  auto a = open_with(kThreeDocIdx, kThreeDocBin);
  ASSERT_TRUE(a.ok());
  const std::string first = a->content_hash();
  std::string idx = kThreeDocIdx;
  idx[34] = '\x02';   // first length 3 -> 2 (still valid: pointers leave a gap)
  auto b = open_with(idx, kThreeDocBin);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_NE(b->content_hash(), first);
}

TEST_F(IndexedDatasetOpen, MissingFilesAreNotFound) {
  EXPECT_EQ(IndexedDataset::open(prefix()).status().code(), StatusCode::kNotFound);
  write_text(prefix() + ".idx", kThreeDocIdx);
  auto r = IndexedDataset::open(prefix());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(".bin"), std::string::npos);
}

// A FIFO (or a device) where the .bin belongs is refused naming it, without waiting for a writer.
TEST_F(IndexedDatasetOpen, AFifoInPlaceOfTheBinIsRefusedWithoutBlocking) {
  write_text(prefix() + ".idx", kThreeDocIdx);
  ASSERT_EQ(::mkfifo((prefix() + ".bin").c_str(), 0600), 0);
  auto r = IndexedDataset::open(prefix());
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().to_string();
  EXPECT_NE(r.status().message().find("d.bin' is a FIFO, not a regular file"), std::string::npos)
      << r.status().message();
}

TEST_F(IndexedDatasetOpen, RefusesTruncatedIndex) {
  expect_corrupt(open_with(kThreeDocIdx.substr(0, kThreeDocIdx.size() - 1), kThreeDocBin),
                 {"d.idx", "do not match the file size"});
  expect_corrupt(open_with(kThreeDocIdx.substr(0, 20), kThreeDocBin), {"shorter than the 34-byte header"});
  expect_corrupt(open_with("", kThreeDocBin), {"truncated"});
}

TEST_F(IndexedDatasetOpen, RefusesWrongMagic) {
  std::string idx = kThreeDocIdx;
  idx[0] = 'X';
  expect_corrupt(open_with(idx, kThreeDocBin), {"magic", "byte offset 0"});
}

TEST_F(IndexedDatasetOpen, RefusesWrongVersion) {
  std::string idx = kThreeDocIdx;
  idx[9] = '\x02';
  expect_corrupt(open_with(idx, kThreeDocBin), {"version is 2", "byte offset 9"});
}

TEST_F(IndexedDatasetOpen, RefusesNonTokenAndUnknownDtypes) {
  std::string idx = kThreeDocIdx;
  idx[17] = '\x07';
  expect_corrupt(open_with(idx, kThreeDocBin), {"f32", "not a token dtype", "byte offset 17"});
  idx[17] = '\x0b';
  expect_corrupt(open_with(idx, kThreeDocBin), {"unknown dtype code 11"});
}

TEST_F(IndexedDatasetOpen, RefusesBinShorterThanTheIndexSays) {
  expect_corrupt(open_with(kThreeDocIdx, kThreeDocBin.substr(0, 11)),
                 {"d.bin", "is 11 bytes", "sequence 2", "ends at byte 12"});
}

TEST_F(IndexedDatasetOpen, RefusesPointerPastTheBin) {
  std::string idx = kThreeDocIdx;
  idx[34 + 12 + 16] = '\x40';  // pointer of sequence 2: 8 -> 64
  expect_corrupt(open_with(idx, kThreeDocBin), {"d.bin", "sequence 2"});
}

TEST_F(IndexedDatasetOpen, RefusesDecreasingPointers) {
  std::string idx = kThreeDocIdx;
  idx[34 + 12 + 8] = '\x02';   // pointer of sequence 1: 6 -> 2, inside sequence 0
  expect_corrupt(open_with(idx, kThreeDocBin), {"pointer of sequence 1", "pointers must increase", "byte offset 54"});
}

TEST_F(IndexedDatasetOpen, RefusesNegativeLength) {
  std::string idx = kThreeDocIdx;
  idx[34 + 4 + 3] = '\xff';
  expect_corrupt(open_with(idx, kThreeDocBin), {"negative length", "byte offset 38"});
}

TEST_F(IndexedDatasetOpen, RefusesBadDocumentIndex) {
  std::string idx = kThreeDocIdx;
  idx[70] = '\x01';  // first entry 0 -> 1
  expect_corrupt(open_with(idx, kThreeDocBin), {"document index entry 0", "byte offset 70"});
  idx = kThreeDocIdx;
  idx[70 + 24] = '\x02';  // last entry 3 -> 2
  expect_corrupt(open_with(idx, kThreeDocBin), {"ends at 2 but there are 3 sequences"});
  idx = kThreeDocIdx;
  idx[70 + 16] = '\x00';  // entry 2 -> 0 < entry 1
  expect_corrupt(open_with(idx, kThreeDocBin), {"never decrease"});
}

TEST_F(IndexedDatasetOpen, RefusesHugeCountsWithoutAllocating) {
  std::string idx = kThreeDocIdx;
  for (int i = 18; i < 34; ++i) idx[i] = '\xff';
  expect_corrupt(open_with(idx, kThreeDocBin), {"do not match the file size"});
}

// i64 tokens as the .bin stores them.
std::string i64_bin(std::initializer_list<int64_t> ids) {
  std::string bin;
  for (int64_t id : ids) bin.append(reinterpret_cast<const char*>(&id), sizeof(id));
  return bin;
}

TEST_F(IndexedDatasetOpen, ReadsI64IdsThatFitInt32) {
  const std::string idx = encode_index(static_cast<uint8_t>(TokenDType::kI64), std::vector<int32_t>{2, 1},
                                       std::vector<int64_t>{0, 1, 2});
  auto ds = open_with(idx, i64_bin({3, 2147483647, 9}));
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(sequence(*ds, 0), (std::vector<int32_t>{3, 2147483647}));
  EXPECT_EQ(sequence(*ds, 1), (std::vector<int32_t>{9}));
}

// 2^32 + 5 narrowed to int32 is 5: open() refuses it (so verify, inspect, dump, the planner and
// the loaders all do), naming sequence, document and token.
TEST_F(IndexedDatasetOpen, RefusesI64IdsOutsideInt32NamingThePosition) {
  const std::string idx = encode_index(static_cast<uint8_t>(TokenDType::kI64), std::vector<int32_t>{1, 2},
                                       std::vector<int64_t>{0, 1, 2});
  expect_corrupt(open_with(idx, i64_bin({3, 9, (int64_t{1} << 32) + 5})),
                 {"d.bin", "sequence 1 (document 1) token 1", "4294967301", "does not fit int32"});
  expect_corrupt(open_with(idx, i64_bin({-(int64_t{1} << 40), 9, 4})), {"sequence 0 (document 0) token 0"});
}

TEST_F(IndexedDatasetOpen, ReadsTheSidecar) {
  auto writer = IndexedDatasetWriter::create(prefix(), 8);
  ASSERT_TRUE(writer.ok());
  DatasetMeta meta;
  meta.tokenizer_hash = "abc";
  meta.vocab_size = 70000;
  ASSERT_TRUE((*writer)->add_document(std::vector<int32_t>{1}).ok());
  ASSERT_TRUE((*writer)->finish(meta).ok());
  auto ds = IndexedDataset::open(prefix());
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  ASSERT_TRUE(ds->meta().has_value());
  EXPECT_EQ(ds->meta()->tokenizer_hash, "abc");
  EXPECT_EQ(ds->meta()->vocab_size, 70000);
}

TEST_F(IndexedDatasetOpen, RefusesCorruptSidecar) {
  write_text(prefix() + ".meta.json", "{\"format\": \"ms-dataset-meta\", ");
  expect_corrupt(open_with(kThreeDocIdx, kThreeDocBin), {"d.meta.json", "not a JSON object"});
  write_text(prefix() + ".meta.json", "{\"format\": \"ms-dataset-meta\", \"format_version\": 1}");
  expect_corrupt(open_with(kThreeDocIdx, kThreeDocBin), {"d.meta.json", "missing key 'toolkit_version'"});
  write_text(prefix() + ".meta.json", "{\"format\": \"ms-dataset-meta\", \"format_version\": 99}");
  expect_corrupt(open_with(kThreeDocIdx, kThreeDocBin), {"format_version 99"});
}

TEST_F(IndexedDatasetOpen, RefusesSidecarOfAnotherBuild) {
  DatasetMeta meta;
  meta.dtype = "u16";
  meta.documents = meta.sequences = 3;
  meta.tokens = 7;
  write_text(prefix() + ".meta.json", dataset_meta_to_json(meta));
  expect_corrupt(open_with(kThreeDocIdx, kThreeDocBin), {"belongs to another build"});
  meta.tokens = 6;
  write_text(prefix() + ".meta.json", dataset_meta_to_json(meta));
  EXPECT_TRUE(open_with(kThreeDocIdx, kThreeDocBin).ok());
}

TEST(DatasetMeta, RoundTripsThroughJson) {
  DatasetMeta meta;
  meta.toolkit_version = "0.1.0";
  meta.tokenizer_path = "tok.json";
  meta.tokenizer_kind = "byte-level-bpe";
  meta.vocab_size = 50257;
  meta.eos_id = 50256;
  meta.append_eos = true;
  meta.dtype = "u16";
  meta.sources.push_back(DatasetSource{"a.jsonl", 2, 100, 40, 1});
  meta.documents = 2;
  meta.tokens = 40;
  auto parsed = parse_dataset_meta(dataset_meta_to_json(meta), "m.json");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(dataset_meta_to_json(*parsed), dataset_meta_to_json(meta));
  EXPECT_EQ(parsed->sources[0].skipped_lines, 1u);
}

TEST(DtypeCodes, FollowMegatron) {
  EXPECT_EQ(dtype_code_for_vocab(50257), 8);
  EXPECT_EQ(dtype_code_for_vocab(65536), 8);
  EXPECT_EQ(dtype_code_for_vocab(65537), 4);
  EXPECT_EQ(dtype_code_for_vocab(128256), 4);
  EXPECT_EQ(dtype_code_itemsize(8), 2u);
  EXPECT_EQ(dtype_code_itemsize(5), 8u);
  EXPECT_EQ(dtype_code_name(6), "f64");
  EXPECT_TRUE(check_token_dtype(1).ok());
  EXPECT_FALSE(check_token_dtype(2).ok());
}

}  // namespace
}  // namespace ms::data
