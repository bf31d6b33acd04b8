// IndexedDataset (mmap + one validating pass over the index) and IndexedDatasetWriter (buffered
// appends to an AtomicFileWriter, index built in memory, three-file commit with .idx last).
// The .idx arrays start at byte 34 and are therefore unaligned: every field is read with memcpy.
#include "data/indexed_dataset.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>

#include "core/crc32c.h"
#include "core/version.h"
#include "io/env.h"
#include "io/mapping_guard.h"

namespace ms::data {

static_assert(std::endian::native == std::endian::little,
              "the Megatron format is little-endian; big-endian hosts are not supported");

namespace {

constexpr size_t kVersionOffset = 9;
constexpr size_t kDTypeOffset = 17;
constexpr size_t kSequenceCountOffset = 18;
constexpr size_t kDocumentCountOffset = 26;
constexpr size_t kWriteBufferBytes = 1 << 20;

template <typename T>
T load(const uint8_t* base, uint64_t offset) {
  T value;
  std::memcpy(&value, base + offset, sizeof(T));
  return value;
}

template <typename T>
void store(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

std::string hex(uint64_t value, int digits) {
  char text[17];
  std::snprintf(text, sizeof(text), "%0*" PRIx64, digits, value);
  return text;
}

int64_t max_token_for(uint8_t code) {
  switch (static_cast<TokenDType>(code)) {
    case TokenDType::kU8: return std::numeric_limits<uint8_t>::max();
    case TokenDType::kU16: return std::numeric_limits<uint16_t>::max();
    default: return std::numeric_limits<int32_t>::max();
  }
}

}  // namespace

std::string dtype_code_name(uint8_t code) {
  switch (static_cast<TokenDType>(code)) {
    case TokenDType::kU8: return "u8";
    case TokenDType::kI8: return "i8";
    case TokenDType::kI16: return "i16";
    case TokenDType::kI32: return "i32";
    case TokenDType::kI64: return "i64";
    case TokenDType::kF64: return "f64";
    case TokenDType::kF32: return "f32";
    case TokenDType::kU16: return "u16";
  }
  return "code " + std::to_string(code);
}

size_t dtype_code_itemsize(uint8_t code) {
  switch (static_cast<TokenDType>(code)) {
    case TokenDType::kU8: case TokenDType::kI8: return 1;
    case TokenDType::kI16: case TokenDType::kU16: return 2;
    case TokenDType::kI32: case TokenDType::kF32: return 4;
    case TokenDType::kI64: case TokenDType::kF64: return 8;
  }
  return 0;
}

Status check_token_dtype(uint8_t code) {
  switch (static_cast<TokenDType>(code)) {
    case TokenDType::kU8: case TokenDType::kU16: case TokenDType::kI32: case TokenDType::kI64:
      return Status::OK();
    case TokenDType::kI8: case TokenDType::kI16: case TokenDType::kF32: case TokenDType::kF64:
      return InvalidArgument("dtype " + dtype_code_name(code) +
                             " is not a token dtype (token datasets use u8, u16, i32 or i64)");
  }
  return InvalidArgument("unknown dtype code " + std::to_string(code) +
                         " (Megatron's codes are 1..8)");
}

uint8_t dtype_code_for_vocab(int64_t vocab_size) {
  return static_cast<uint8_t>(vocab_size <= 65536 ? TokenDType::kU16 : TokenDType::kI32);
}

std::string encode_index(uint8_t dtype_code, std::span<const int32_t> lengths,
                         std::span<const int64_t> document_index) {
  const size_t itemsize = dtype_code_itemsize(dtype_code);
  std::string out(kIndexMagic);
  out.reserve(kIndexHeaderBytes + lengths.size() * 12 + document_index.size() * 8);
  store<uint64_t>(&out, kIndexVersion);
  store<uint8_t>(&out, dtype_code);
  store<uint64_t>(&out, lengths.size());
  store<uint64_t>(&out, document_index.size());
  for (int32_t length : lengths) store<int32_t>(&out, length);
  int64_t pointer = 0;
  for (int32_t length : lengths) {
    store<int64_t>(&out, pointer);
    pointer += static_cast<int64_t>(length) * static_cast<int64_t>(itemsize);
  }
  for (int64_t d : document_index) store<int64_t>(&out, d);
  return out;
}

// ---------------------------------------------------------------------------------------------
// IndexedDataset

IndexedDataset::IndexedDataset(IndexedDataset&&) noexcept = default;
IndexedDataset& IndexedDataset::operator=(IndexedDataset&&) noexcept = default;
IndexedDataset::~IndexedDataset() = default;

Result<IndexedDataset> IndexedDataset::open(const std::string& prefix) {
  IndexedDataset ds;
  ds.prefix_ = prefix;
  MS_ASSIGN_OR_RETURN(ds.idx_, io::MappedFile::open(prefix + ".idx", "dataset file"));
  MS_ASSIGN_OR_RETURN(ds.bin_, io::MappedFile::open(prefix + ".bin", "dataset file"));
  ds.idx_size_ = ds.idx_->size();
  ds.bin_size_ = ds.bin_->size();
  MS_RETURN_IF_ERROR(ds.validate_index());
  MS_RETURN_IF_ERROR(ds.check_i64_ids());
  const uint32_t crc = crc32c(ds.idx_->data(), ds.idx_size_);
  ds.content_hash_ = hex(crc, 8) + hex(ds.bin_size_, 16);
  MS_RETURN_IF_ERROR(ds.load_meta());
  return ds;
}

Status IndexedDataset::validate_index() {
  const std::string idx_path = prefix_ + ".idx";
  const std::string bin_path = prefix_ + ".bin";
  const uint8_t* p = idx_->data();
  auto bad = [&](uint64_t offset, const std::string& what) {
    return Corruption(idx_path + ": " + what + " (at byte offset " + std::to_string(offset) + ")");
  };
  if (idx_size_ < kIndexHeaderBytes) {
    return bad(0, "file is " + std::to_string(idx_size_) + " bytes, shorter than the " +
                      std::to_string(kIndexHeaderBytes) + "-byte header; the index is truncated");
  }
  if (std::memcmp(p, kIndexMagic.data(), kIndexMagic.size()) != 0) {
    return bad(0, "magic is not \"MMIDIDX\\x00\\x00\"; this is not a Megatron indexed dataset index");
  }
  const uint64_t version = load<uint64_t>(p, kVersionOffset);
  if (version != kIndexVersion) {
    return bad(kVersionOffset, "version is " + std::to_string(version) + ", only version 1 is supported");
  }
  dtype_code_ = p[kDTypeOffset];
  Status dtype_ok = check_token_dtype(dtype_code_);
  if (!dtype_ok.ok()) return bad(kDTypeOffset, "dtype: " + dtype_ok.message());
  itemsize_ = dtype_code_itemsize(dtype_code_);
  const uint64_t n = load<uint64_t>(p, kSequenceCountOffset);
  const uint64_t m = load<uint64_t>(p, kDocumentCountOffset);
  const uint64_t body = idx_size_ - kIndexHeaderBytes;
  if (n > body / 12 || m > body / 8 || 12 * n + 8 * m != body) {
    return bad(kSequenceCountOffset,
               "header counts " + std::to_string(n) + " sequences and " + std::to_string(m) +
                   " document-index entries, which do not match the file size of " +
                   std::to_string(idx_size_) + " bytes (truncated or corrupt index)");
  }
  if (m == 0) return bad(kDocumentCountOffset, "document index is empty; it must start with 0");
  num_sequences_ = n;
  const uint64_t lengths_at = kIndexHeaderBytes;
  const uint64_t pointers_at = lengths_at + 4 * n;
  const uint64_t documents_at = pointers_at + 8 * n;
  uint64_t min_pointer = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t length = load<int32_t>(p, lengths_at + 4 * i);
    const int64_t pointer = load<int64_t>(p, pointers_at + 8 * i);
    if (length < 0) return bad(lengths_at + 4 * i, "sequence " + std::to_string(i) + " has negative length " + std::to_string(length));
    if (pointer < 0 || static_cast<uint64_t>(pointer) < min_pointer) {
      return bad(pointers_at + 8 * i, "pointer of sequence " + std::to_string(i) + " is " +
                                          std::to_string(pointer) + ", before the end of the previous sequence (" +
                                          std::to_string(min_pointer) + "); pointers must increase");
    }
    const uint64_t end = static_cast<uint64_t>(pointer) + static_cast<uint64_t>(length) * itemsize_;
    if (end > bin_size_) {
      return Corruption(bin_path + ": is " + std::to_string(bin_size_) + " bytes but sequence " +
                        std::to_string(i) + " (index pointer at byte offset " +
                        std::to_string(pointers_at + 8 * i) + " of " + idx_path + ") ends at byte " +
                        std::to_string(end) + "; the .bin is truncated or does not belong to this index");
    }
    min_pointer = end;
    total_tokens_ += static_cast<uint64_t>(length);
  }
  document_index_.resize(m);
  for (uint64_t j = 0; j < m; ++j) {
    const int64_t d = load<int64_t>(p, documents_at + 8 * j);
    const int64_t previous = j == 0 ? 0 : document_index_[j - 1];
    if ((j == 0 && d != 0) || d < previous || static_cast<uint64_t>(d) > n) {
      return bad(documents_at + 8 * j, "document index entry " + std::to_string(j) + " is " +
                                           std::to_string(d) + "; entries must start at 0, never decrease and stay <= the sequence count " +
                                           std::to_string(n));
    }
    document_index_[j] = d;
  }
  if (static_cast<uint64_t>(document_index_.back()) != n) {
    return bad(documents_at + 8 * (m - 1), "document index ends at " + std::to_string(document_index_.back()) +
                                               " but there are " + std::to_string(n) + " sequences");
  }
  return Status::OK();
}

// Readers hand out ids as int32, so an i64 dataset is only usable when every id fits; a value
// like 2^32 + 5 would otherwise read as 5. Checked once here, so no reader (verify, inspect,
// dump, loaders, the planner) can narrow silently. Costs one sequential pass over the .bin, for
// i64 datasets only.
Status IndexedDataset::check_i64_ids() const {
  if (static_cast<TokenDType>(dtype_code_) != TokenDType::kI64) return Status::OK();
  for (size_t seq = 0; seq < num_sequences_; ++seq) {
    const int64_t pointer = sequence_pointer(seq);
    const int32_t length = sequence_length(seq);
    for (int32_t i = 0; i < length; ++i) {
      const uint64_t at = static_cast<uint64_t>(pointer) + 8 * static_cast<uint64_t>(i);
      const int64_t id = load<int64_t>(bin_->data(), at);
      if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
        auto doc = std::upper_bound(document_index_.begin(), document_index_.end(), static_cast<int64_t>(seq));
        return Corruption(prefix_ + ".bin: sequence " + std::to_string(seq) + " (document " +
                          std::to_string(doc - document_index_.begin() - 1) + ") token " +
                          std::to_string(i) + " (byte offset " + std::to_string(at) + ") holds id " +
                          std::to_string(id) + ", which does not fit int32; token ids are read as int32");
      }
    }
  }
  return Status::OK();
}

Status IndexedDataset::load_meta() {
  const std::string path = prefix_ + ".meta.json";
  io::Env& env = io::default_env();
  if (!env.exists(path)) return Status::OK();
  MS_ASSIGN_OR_RETURN(DatasetMeta meta, read_dataset_meta(env, path));
  if (meta.sequences != num_sequences_ || meta.documents != num_documents() ||
      meta.tokens != total_tokens_ || meta.dtype != dtype_code_name(dtype_code_)) {
    return Corruption(path + ": describes " + std::to_string(meta.documents) + " documents, " +
                      std::to_string(meta.sequences) + " sequences, " + std::to_string(meta.tokens) +
                      " tokens of " + meta.dtype + " but the index holds " + std::to_string(num_documents()) +
                      ", " + std::to_string(num_sequences_) + ", " + std::to_string(total_tokens_) +
                      " of " + dtype_code_name(dtype_code_) + "; the sidecar belongs to another build");
  }
  meta_ = std::move(meta);
  return Status::OK();
}

int32_t IndexedDataset::sequence_length(size_t seq) const {
  assert(seq < num_sequences_);
  return load<int32_t>(idx_->data(), kIndexHeaderBytes + 4 * seq);
}

int64_t IndexedDataset::sequence_pointer(size_t seq) const {
  assert(seq < num_sequences_);
  return load<int64_t>(idx_->data(), kIndexHeaderBytes + 4 * num_sequences_ + 8 * seq);
}

void IndexedDataset::read_tokens(size_t seq, size_t offset, size_t count, int32_t* out) const {
  assert(offset + count <= static_cast<size_t>(sequence_length(seq)));
  if (count == 0) return;
  const uint8_t* src = bin_->data() + sequence_pointer(seq) + offset * itemsize_;
  switch (static_cast<TokenDType>(dtype_code_)) {
    case TokenDType::kI32:
      std::memcpy(out, src, count * 4);
      return;
    case TokenDType::kU16:
      for (size_t i = 0; i < count; ++i) out[i] = load<uint16_t>(src, 2 * i);
      return;
    case TokenDType::kU8:
      for (size_t i = 0; i < count; ++i) out[i] = src[i];
      return;
    default:  // i64, the only other dtype open() accepts
      for (size_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(load<int64_t>(src, 8 * i));
      return;
  }
}

// ---------------------------------------------------------------------------------------------
// IndexedDatasetWriter

IndexedDatasetWriter::IndexedDatasetWriter(io::Env& env, std::string prefix, uint8_t dtype_code)
    : env_(env), prefix_(std::move(prefix)), dtype_code_(dtype_code),
      itemsize_(dtype_code_itemsize(dtype_code)) {}

IndexedDatasetWriter::~IndexedDatasetWriter() = default;

Result<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::create(
    const std::string& prefix, uint8_t dtype_code) {
  return create(io::default_env(), prefix, dtype_code);
}

Result<std::unique_ptr<IndexedDatasetWriter>> IndexedDatasetWriter::create(
    io::Env& env, const std::string& prefix, uint8_t dtype_code) {
  MS_RETURN_IF_ERROR(check_token_dtype(dtype_code).with_context(prefix));
  std::unique_ptr<IndexedDatasetWriter> writer(new IndexedDatasetWriter(env, prefix, dtype_code));
  MS_ASSIGN_OR_RETURN(writer->bin_, io::AtomicFileWriter::create(env, prefix + ".bin"));
  writer->buffer_.reserve(kWriteBufferBytes + 4096);
  return writer;
}

// Records the first failure so later calls return it; passes an OK status through.
Status IndexedDatasetWriter::fail(Status status) {
  if (status.ok()) return status;
  if (error_.ok()) error_ = status;
  return error_;
}

Status IndexedDatasetWriter::flush_buffer() {
  if (buffer_.empty()) return Status::OK();
  Status status = bin_->append(buffer_);
  buffer_.clear();
  return status.ok() ? status : fail(status);
}

Status IndexedDatasetWriter::add_sequence(std::span<const int32_t> tokens) {
  if (!error_.ok()) return error_;
  if (finished_) return fail(FailedPrecondition(prefix_ + ": add after finish()"));
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    return InvalidArgument(prefix_ + ": a sequence of " + std::to_string(tokens.size()) +
                           " tokens exceeds the format's int32 length");
  }
  const int64_t max_token = max_token_for(dtype_code_);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] > max_token) {
      return InvalidArgument(prefix_ + ": token " + std::to_string(tokens[i]) + " at position " +
                             std::to_string(i) + " of sequence " + std::to_string(lengths_.size()) +
                             " does not fit dtype " + dtype_code_name(dtype_code_));
    }
  }
  for (int32_t t : tokens) {
    switch (static_cast<TokenDType>(dtype_code_)) {
      case TokenDType::kU8: store<uint8_t>(&buffer_, static_cast<uint8_t>(t)); break;
      case TokenDType::kU16: store<uint16_t>(&buffer_, static_cast<uint16_t>(t)); break;
      case TokenDType::kI64: store<int64_t>(&buffer_, t); break;
      default: store<int32_t>(&buffer_, t); break;
    }
  }
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  tokens_ += tokens.size();
  return buffer_.size() >= kWriteBufferBytes ? flush_buffer() : Status::OK();
}

void IndexedDatasetWriter::end_document() {
  document_index_.push_back(static_cast<int64_t>(lengths_.size()));
}

Status IndexedDatasetWriter::add_document(std::span<const int32_t> tokens) {
  if (!error_.ok()) return error_;
  if (finished_) return fail(FailedPrecondition(prefix_ + ": add after finish()"));
  if (!tokens.empty()) MS_RETURN_IF_ERROR(add_sequence(tokens));
  end_document();
  return Status::OK();
}

Status IndexedDatasetWriter::finish(const DatasetMeta& meta) {
  if (!error_.ok()) return error_;
  if (finished_) return fail(FailedPrecondition(prefix_ + ": finish() called twice"));
  finished_ = true;
  if (document_index_.back() != static_cast<int64_t>(lengths_.size())) end_document();
  MS_RETURN_IF_ERROR(flush_buffer());
  DatasetMeta filled = meta;
  filled.dtype = dtype_code_name(dtype_code_);
  filled.documents = documents();
  filled.sequences = sequences();
  filled.tokens = tokens_;
  if (filled.toolkit_version.empty()) filled.toolkit_version = version_string();
  if (filled.git_revision.empty()) filled.git_revision = std::string(git_revision());
  MS_ASSIGN_OR_RETURN(auto meta_file, io::AtomicFileWriter::create(env_, prefix_ + ".meta.json"));
  MS_ASSIGN_OR_RETURN(auto idx_file, io::AtomicFileWriter::create(env_, prefix_ + ".idx"));
  MS_RETURN_IF_ERROR(fail(meta_file->append(dataset_meta_to_json(filled))));
  MS_RETURN_IF_ERROR(fail(idx_file->append(encode_index(dtype_code_, lengths_, document_index_))));
  // An older index must not pair with the new .bin while the commit is under way.
  const std::string idx_path = prefix_ + ".idx";
  if (env_.exists(idx_path)) MS_RETURN_IF_ERROR(fail(env_.remove_file(idx_path)));
  MS_RETURN_IF_ERROR(fail(bin_->commit()));
  MS_RETURN_IF_ERROR(fail(meta_file->commit()));
  return fail(idx_file->commit());
}

}  // namespace ms::data
