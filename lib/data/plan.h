// The mixture plan file (docs/formats/plan.md): everything needed to materialize any global
// sample of a blended training or validation stream without reading more than that sample's
// tokens. For each split it maps global sample -> (source, sample-in-source), and for each
// source and split it stores the shuffled sequence order of every epoch it uses together with
// the end offset of each sequence in that source's concatenated token stream. Sample k of a
// source covers stream tokens [k*seq_len, k*seq_len + seq_len + 1) (Megatron's GPT dataset
// packing: consecutive samples share their boundary token), so it is found by one binary
// search over the stream ends.
//
// The file is binary with a fixed 64-byte header (magic, version, sizes, crc32c of header and
// payload), a JSON block describing the mixture, a section table and 8-byte aligned arrays.
// Readers validate everything once at open (sizes, crcs, section bounds, counts against the
// JSON, index ranges), so later lookups need no checks; a plan built from bytes never crashes a
// reader (tests/fuzz/plan_reader_fuzz.cc).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/huge_page_array.h"
#include "core/status.h"
#include "data/loader.h"
#include "io/atomic_file.h"
#include "io/bulk_writer.h"

namespace ms::data {

inline constexpr std::string_view kPlanMagic{"MSPLAN\x00\x00", 8};
inline constexpr uint32_t kPlanFormatVersion = 1;
inline constexpr size_t kPlanHeaderBytes = 64;
inline constexpr size_t kPlanSectionEntryBytes = 32;
// The longest sample a plan may hold. Loaders size their buffers by seq_len, so the number a
// file claims is bounded before anything is allocated; 2^24 tokens is far beyond any context
// length in use.
inline constexpr int64_t kMaxPlanSeqLen = int64_t{1} << 24;

// Per source and split: how much data the split has and how much of it the plan uses.
struct PlanSplitCounts {
  uint64_t documents = 0;
  uint64_t sequences = 0;
  uint64_t tokens = 0;
  uint64_t samples = 0;  // samples of this source the split's blend uses
  uint64_t epochs = 0;   // passes over the split's documents needed to pack them
  bool operator==(const PlanSplitCounts&) const = default;
};

struct PlanSource {
  std::string name;
  std::string prefix;
  std::string content_hash;  // IndexedDataset::content_hash() at planning time
  uint64_t dataset_sequences = 0;
  double weight = 0;  // base weight, normalized over the sources
  int64_t vocab_size = 0;  // from the dataset's meta (0 when it has none)
  std::string tokenizer_path;
  std::string tokenizer_hash;
  std::array<PlanSplitCounts, 2> splits;  // indexed by Split
  bool operator==(const PlanSource&) const = default;
};

// From global training sample `at_sample` on, blend with `weights` (normalized, one per
// source). The first phase always starts at 0.
struct PlanPhase {
  int64_t at_sample = 0;
  std::vector<double> weights;
  bool operator==(const PlanPhase&) const = default;
};

struct PlanInfo {
  std::string toolkit_version;
  std::string git_revision;
  int64_t seq_len = 0;
  int64_t seed = 0;
  double validation_fraction = 0;
  std::vector<PlanSource> sources;
  std::vector<PlanPhase> schedule;
  std::array<int64_t, 2> samples{};  // global samples per split, indexed by Split
  bool operator==(const PlanInfo&) const = default;
};

// The arrays of one split, whole in memory, for write_plan_file (tests and tools that rewrite a
// plan). The planner itself hands its arrays to a PlanFileWriter as it makes them.
struct PlanSplitArrays {
  HugePageArray<uint16_t> blend_source;  // global sample -> source
  HugePageArray<uint64_t> blend_index;   // global sample -> sample index within the source
  std::vector<HugePageArray<uint32_t>> sequence_order;  // per source: sequences, epoch after epoch
  std::vector<HugePageArray<uint64_t>> stream_end;      // per source: end offset of each entry
};

// What a plan writer wrote: Plan::hash() and Plan::file_size() of the file, without reading it
// back.
struct PlanFileSummary {
  std::string hash;
  uint64_t bytes = 0;
};

// The kinds of array a plan holds (docs/formats/plan.md).
enum class PlanSection : uint32_t {
  kBlendSource = 1,    // u16 per global sample
  kBlendIndex = 2,     // u64 per global sample
  kSequenceOrder = 3,  // u32 per (epoch, sequence) of one source
  kStreamEnd = 4,      // u64 per (epoch, sequence) of one source
};

// One entry of a plan's section table: where the array of (kind, split, source) lies.
struct PlanSectionEntry {
  uint32_t kind = 0;
  uint32_t split = 0;
  uint32_t source = 0;  // 0xFFFFFFFF for the blend kinds
  uint32_t elem_bytes = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
};

// Writes a plan file as its arrays are produced: the caller begins each section and appends its
// elements, possibly in pieces, while the disk writes what came before; finish() appends the
// description and the section table, which need the whole plan's counts, and then writes the
// header. The file goes to the disk bypassing the page cache where the filesystem allows
// (io::BulkWriter): a plan is hundreds of MB that nothing reads back soon, and copying it into
// the cache cost more than building it. Atomic: nothing is at `path` until finish() succeeds,
// and a writer destroyed before that leaves nothing behind.
class PlanFileWriter {
 public:
  // IOError naming `path` when the temporary file cannot be created. `env` outlives the writer.
  static Result<std::unique_ptr<PlanFileWriter>> create(io::Env& env, const std::string& path);
  static Result<std::unique_ptr<PlanFileWriter>> create(const std::string& path);
  ~PlanFileWriter();
  PlanFileWriter(const PlanFileWriter&) = delete;
  PlanFileWriter& operator=(const PlanFileWriter&) = delete;

  // Ends the open section and starts section (kind, split, source) at the next 8-byte boundary
  // (`source` is not used by the blend kinds).
  Status begin_section(PlanSection kind, int split, uint32_t source = 0);
  // Appends elements of the open section's type (copied: `elements` may change once this
  // returns).
  template <class T>
  Status append(std::span<const T> elements) {
    return append_bytes(std::as_bytes(elements));
  }
  // Writes the description of `info` and the section table, the header, fsyncs and renames the
  // file into place. FailedPrecondition unless every section of `info`'s sources was written.
  Result<PlanFileSummary> finish(const PlanInfo& info);

 private:
  PlanFileWriter(std::unique_ptr<io::AtomicFileWriter> file, std::unique_ptr<io::BulkWriter> out);
  Status append_bytes(std::span<const std::byte> bytes);
  Status append_copy(std::string_view data);
  Status pad_to_8();
  void close_section();

  std::unique_ptr<io::AtomicFileWriter> file_;
  std::unique_ptr<io::BulkWriter> out_;
  std::vector<PlanSectionEntry> sections_;
  int open_ = -1;     // index of the section being appended to, or -1
  uint32_t crc_ = 0;  // payload crc so far
};

// Writes `info` and the arrays of both splits to `path` with a PlanFileWriter.
Result<PlanFileSummary> write_plan_file(io::Env& env, const std::string& path, const PlanInfo& info,
                                        const std::array<PlanSplitArrays, 2>& splits);
Result<PlanFileSummary> write_plan_file(const std::string& path, const PlanInfo& info,
                                        const std::array<PlanSplitArrays, 2>& splits);

// `count` tokens of dataset sequence `sequence` starting at token `offset`.
struct TokenRange {
  uint64_t sequence = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
};

struct SampleRef {
  uint32_t source = 0;
  uint64_t index = 0;  // sample index within the source's stream
};

// A validated, read-only plan. Shared by loaders; safe to read from many threads.
class Plan {
 public:
  // Maps `path` and validates it. NotFound when missing; Corruption naming the file and what is
  // wrong (bad magic, truncated, crc mismatch, section out of bounds, counts disagreeing);
  // FailedPrecondition for a newer format version.
  static Result<std::shared_ptr<const Plan>> open(const std::string& path);
  // The same validation on bytes in memory; `name` stands for the file in errors.
  static Result<std::shared_ptr<const Plan>> from_bytes(std::string bytes, const std::string& name);
  ~Plan();

  const PlanInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  // 16 hex digits: crc32c of the payload and of the header (which records the file size).
  const std::string& hash() const { return hash_; }
  uint64_t file_size() const { return bytes_.size(); }

  int64_t samples(Split split) const { return info_.samples[static_cast<int>(split)]; }
  // Where global sample `global` (< samples(split), asserted) of `split` comes from.
  SampleRef sample(Split split, int64_t global) const;
  // Appends to `out` the token ranges that make up source sample `ref` (seq_len + 1 tokens).
  void sample_ranges(Split split, SampleRef ref, std::vector<TokenRange>& out) const;

  std::span<const uint32_t> sequence_order(Split split, uint32_t source) const;
  std::span<const uint64_t> stream_end(Split split, uint32_t source) const;

  struct Arrays;

 private:
  Plan() = default;
  Status parse(const std::string& name);

  std::shared_ptr<const void> storage_;  // keeps bytes_ alive (a mapping or a string)
  std::span<const uint8_t> bytes_;
  std::string path_;
  std::string hash_;
  PlanInfo info_;
  std::unique_ptr<Arrays> arrays_;
};

}  // namespace ms::data
