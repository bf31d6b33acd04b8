// Megatron-LM's indexed token dataset, byte for byte: `<prefix>.bin` holds every sequence's
// tokens back to back; `<prefix>.idx` is
//   "MMIDIDX\x00\x00" | u64 version 1 | u8 dtype code | u64 sequence count N |
//   u64 document-index length M (documents + 1) | i32 lengths[N] | i64 byte pointers[N] |
//   i64 document index[M]
// all little-endian, with no padding (so the arrays are generally unaligned). Datasets made by
// Megatron's preprocess_data.py open here unchanged and ours open in Megatron. A sidecar
// `<prefix>.meta.json` (dataset_meta.h) describes the tokenizer and sources; Megatron ignores it.
//
// Reading maps both files and validates the whole index once at open(), so later reads need no
// checks beyond the caller's bounds. Writing streams tokens into a temporary .bin and commits
// .bin, .meta.json and finally .idx by rename, so an interrupted build never leaves a dataset
// that opens. Layout and rules: docs/formats/megatron-dataset.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/dataset_meta.h"
#include "io/atomic_file.h"
#include "io/env.h"
#include "io/mapping_guard.h"

namespace ms::data {

// Megatron's dtype codes (append-only, fixed by Megatron-LM).
enum class TokenDType : uint8_t {
  kU8 = 1, kI8 = 2, kI16 = 3, kI32 = 4, kI64 = 5, kF64 = 6, kF32 = 7, kU16 = 8,
};

inline constexpr std::string_view kIndexMagic{"MMIDIDX\x00\x00", 9};
inline constexpr uint64_t kIndexVersion = 1;
inline constexpr size_t kIndexHeaderBytes = 9 + 8 + 1 + 8 + 8;  // 34

// "u16", "i32", ...; "code N" for codes outside the table.
std::string dtype_code_name(uint8_t code);
// Bytes per element of a known code; 0 for an unknown one.
size_t dtype_code_itemsize(uint8_t code);
// OK when token datasets may be read with `code` (u8, u16, i32, i64); InvalidArgument saying
// why otherwise (floating-point, signed 8/16-bit and unknown codes are refused).
Status check_token_dtype(uint8_t code);
// The smallest code that holds every id of a vocabulary of `vocab_size`: u16 when
// vocab_size <= 65536, else i32.
uint8_t dtype_code_for_vocab(int64_t vocab_size);

// Read-only view of `<prefix>.idx` + `<prefix>.bin`, both memory-mapped. Movable, not copyable;
// the mappings are released on destruction. Safe to read from many threads at once.
class IndexedDataset {
 public:
  // Maps and validates the dataset: magic, version, dtype code, counts against the .idx size,
  // non-negative lengths, pointers that increase without overlap and stay inside the .bin,
  // a document index that starts at 0, never decreases and ends at the sequence count, every id
  // of an i64 dataset inside int32 (one pass over the .bin), and a readable, matching
  // .meta.json when one exists. NotFound when a file is missing; Corruption
  // naming the file, the field and its byte offset otherwise.
  static Result<IndexedDataset> open(const std::string& prefix);

  IndexedDataset(IndexedDataset&&) noexcept;
  IndexedDataset& operator=(IndexedDataset&&) noexcept;
  ~IndexedDataset();

  size_t num_sequences() const { return num_sequences_; }
  size_t num_documents() const { return document_index_.size() - 1; }
  // Tokens in sequence `seq` (< num_sequences(), asserted).
  int32_t sequence_length(size_t seq) const;
  // Byte offset of sequence `seq` in the .bin.
  int64_t sequence_pointer(size_t seq) const;
  // Copies tokens [offset, offset+count) of sequence `seq` into `out`, as int32 (open() has
  // refused an i64 dataset with an id outside int32). The range must lie inside the sequence
  // (asserted).
  void read_tokens(size_t seq, size_t offset, size_t count, int32_t* out) const;
  // Sequence boundaries of the documents: document d spans sequences
  // [document_index()[d], document_index()[d+1]). num_documents() + 1 entries.
  std::span<const int64_t> document_index() const { return document_index_; }

  uint8_t dtype_code() const { return dtype_code_; }
  size_t itemsize() const { return itemsize_; }
  uint64_t total_tokens() const { return total_tokens_; }
  uint64_t bin_size() const { return bin_size_; }
  uint64_t idx_size() const { return idx_size_; }
  const std::string& prefix() const { return prefix_; }
  // Cheap identity for plan validation: 8 hex digits of the CRC-32C of the .idx bytes followed
  // by 16 hex digits of the .bin size. Computed at open().
  const std::string& content_hash() const { return content_hash_; }
  // The sidecar <prefix>.meta.json when present.
  const std::optional<DatasetMeta>& meta() const { return meta_; }

 private:
  IndexedDataset() = default;
  Status validate_index();
  Status check_i64_ids() const;
  Status load_meta();

  std::string prefix_;
  std::unique_ptr<io::MappedFile> idx_;  // read through the mapping (io/mapping_guard.h)
  std::unique_ptr<io::MappedFile> bin_;
  uint8_t dtype_code_ = 0;
  size_t itemsize_ = 0;
  size_t num_sequences_ = 0;
  uint64_t idx_size_ = 0;
  uint64_t bin_size_ = 0;
  uint64_t total_tokens_ = 0;
  std::vector<int64_t> document_index_;
  std::string content_hash_;
  std::optional<DatasetMeta> meta_;
};

// The exact .idx bytes for the given arrays (pointers are derived from the lengths), as Megatron's
// _IndexWriter produces them. Exposed for tests and for tools that rewrite an index.
std::string encode_index(uint8_t dtype_code, std::span<const int32_t> lengths,
                         std::span<const int64_t> document_index);

// Streams sequences into `<prefix>.bin`; finish() writes `.idx` and `.meta.json`. Nothing is
// visible under the final names until finish() succeeds: files go to temporary names, are
// fsynced, and are renamed .bin, then .meta.json, then .idx last (an older .idx at the prefix is
// removed first). Destroying an unfinished writer removes its temporary files. After any error
// the writer is poisoned and finish() returns that error.
class IndexedDatasetWriter {
 public:
  // `dtype_code` must be u8, u16, i32 or i64 (InvalidArgument otherwise). `env` must outlive the
  // writer; tests pass a FaultInjectingEnv.
  static Result<std::unique_ptr<IndexedDatasetWriter>> create(const std::string& prefix,
                                                              uint8_t dtype_code);
  static Result<std::unique_ptr<IndexedDatasetWriter>> create(io::Env& env,
                                                              const std::string& prefix,
                                                              uint8_t dtype_code);
  ~IndexedDatasetWriter();
  IndexedDatasetWriter(const IndexedDatasetWriter&) = delete;
  IndexedDatasetWriter& operator=(const IndexedDatasetWriter&) = delete;

  // One document made of one sequence (Megatron's default), or of no sequence when `tokens` is
  // empty (as Megatron's add_document does with an empty document). InvalidArgument naming the
  // token when an id is negative or does not fit the dtype.
  Status add_document(std::span<const int32_t> tokens);
  // Appends one sequence to the current document; end_document() closes it. For datasets with
  // several sequences per document (Megatron's sentence splitting).
  Status add_sequence(std::span<const int32_t> tokens);
  void end_document();
  // Writes the index and the sidecar (whose counts and dtype are filled in from what was
  // written) and commits all three files. Call once.
  Status finish(const DatasetMeta& meta);

  uint64_t documents() const { return document_index_.size() - 1; }
  uint64_t sequences() const { return lengths_.size(); }
  uint64_t tokens() const { return tokens_; }

 private:
  IndexedDatasetWriter(io::Env& env, std::string prefix, uint8_t dtype_code);
  Status flush_buffer();
  Status fail(Status status);

  io::Env& env_;
  std::string prefix_;
  uint8_t dtype_code_;
  size_t itemsize_;
  std::unique_ptr<io::AtomicFileWriter> bin_;
  std::string buffer_;  // encoded tokens not yet appended to bin_
  std::vector<int32_t> lengths_;
  std::vector<int64_t> document_index_{0};
  uint64_t tokens_ = 0;
  Status error_;
  bool finished_ = false;
};

}  // namespace ms::data
