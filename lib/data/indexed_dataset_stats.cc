// Statistics walk the document index and sequence lengths; verification additionally reads
// every token through read_tokens in fixed-size chunks, so memory stays flat for any dataset.
#include "data/indexed_dataset_stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <unordered_map>

namespace ms::data {
namespace {

constexpr size_t kVerifyChunk = 1 << 16;

uint64_t document_tokens(const IndexedDataset& dataset, size_t doc) {
  std::span<const int64_t> index = dataset.document_index();
  uint64_t total = 0;
  for (int64_t s = index[doc]; s < index[doc + 1]; ++s) {
    total += static_cast<uint64_t>(dataset.sequence_length(static_cast<size_t>(s)));
  }
  return total;
}

size_t bucket_of(uint64_t length) {
  return length == 0 ? 0 : static_cast<size_t>(std::bit_width(length));
}

// Document that holds sequence `seq` (the first whose range contains it).
size_t document_of(const IndexedDataset& dataset, size_t seq) {
  std::span<const int64_t> index = dataset.document_index();
  auto it = std::upper_bound(index.begin(), index.end(), static_cast<int64_t>(seq));
  return static_cast<size_t>(it - index.begin()) - 1;
}

Status check_sequence_ids(const IndexedDataset& dataset, size_t seq, int64_t vocab_size,
                          std::vector<int32_t>* buffer) {
  const size_t length = static_cast<size_t>(dataset.sequence_length(seq));
  for (size_t offset = 0; offset < length; offset += kVerifyChunk) {
    const size_t count = std::min(kVerifyChunk, length - offset);
    buffer->resize(count);
    dataset.read_tokens(seq, offset, count, buffer->data());
    for (size_t i = 0; i < count; ++i) {
      const int32_t id = (*buffer)[i];
      if (id < 0 || id >= vocab_size) {
        return Corruption(dataset.prefix() + ".bin: sequence " + std::to_string(seq) +
                          " (document " + std::to_string(document_of(dataset, seq)) +
                          ") position " + std::to_string(offset + i) + " holds token id " +
                          std::to_string(id) + ", outside the vocabulary [0, " +
                          std::to_string(vocab_size) + ")");
      }
    }
  }
  return Status::OK();
}

Status check_bin_size(const IndexedDataset& dataset) {
  const size_t n = dataset.num_sequences();
  const uint64_t end = n == 0 ? 0
                              : static_cast<uint64_t>(dataset.sequence_pointer(n - 1)) +
                                    static_cast<uint64_t>(dataset.sequence_length(n - 1)) * dataset.itemsize();
  if (dataset.bin_size() != end) {
    return Corruption(dataset.prefix() + ".bin: is " + std::to_string(dataset.bin_size()) +
                      " bytes but the index ends its last sequence at byte " + std::to_string(end) +
                      "; the .bin has trailing bytes or belongs to another index");
  }
  return Status::OK();
}

}  // namespace

DatasetStats compute_dataset_stats(const IndexedDataset& dataset) {
  DatasetStats stats;
  stats.documents = dataset.num_documents();
  stats.sequences = dataset.num_sequences();
  stats.tokens = dataset.total_tokens();
  std::vector<uint64_t> counts;
  for (size_t d = 0; d < stats.documents; ++d) {
    const uint64_t length = document_tokens(dataset, d);
    stats.min_document_tokens = d == 0 ? length : std::min(stats.min_document_tokens, length);
    stats.max_document_tokens = std::max(stats.max_document_tokens, length);
    const size_t bucket = bucket_of(length);
    if (counts.size() <= bucket) counts.resize(bucket + 1, 0);
    ++counts[bucket];
  }
  if (stats.documents > 0) {
    stats.mean_document_tokens = static_cast<double>(stats.tokens) / static_cast<double>(stats.documents);
  }
  for (size_t k = 0; k < counts.size(); ++k) {
    const uint64_t lo = k == 0 ? 0 : uint64_t{1} << (k - 1);
    const uint64_t hi = k == 0 ? 0 : (uint64_t{1} << k) - 1;
    stats.histogram.push_back(LengthBucket{lo, hi, counts[k]});
  }
  return stats;
}

UnigramStats compute_unigram_stats(const IndexedDataset& dataset) {
  std::unordered_map<int32_t, uint64_t> counts;
  std::vector<int32_t> buffer;
  for (size_t seq = 0; seq < dataset.num_sequences(); ++seq) {
    const size_t length = static_cast<size_t>(dataset.sequence_length(seq));
    for (size_t offset = 0; offset < length; offset += kVerifyChunk) {
      buffer.resize(std::min(kVerifyChunk, length - offset));
      dataset.read_tokens(seq, offset, buffer.size(), buffer.data());
      for (int32_t id : buffer) ++counts[id];
    }
  }
  UnigramStats stats;
  stats.tokens = dataset.total_tokens();
  stats.distinct_ids = counts.size();
  const double total = static_cast<double>(stats.tokens);
  for (const auto& [id, count] : counts) {
    const double p = static_cast<double>(count) / total;
    stats.entropy_nats -= p * std::log(p);
  }
  return stats;
}

Result<VerifyReport> verify_dataset(const IndexedDataset& dataset, const VerifyOptions& options) {
  MS_RETURN_IF_ERROR(check_bin_size(dataset));
  const std::optional<DatasetMeta>& meta = dataset.meta();
  if (options.tokenizer_hash && meta && meta->tokenizer_hash != *options.tokenizer_hash) {
    return Corruption(dataset.prefix() + ".meta.json: dataset was built with tokenizer hash " +
                      meta->tokenizer_hash + " but the given tokenizer's hash is " +
                      *options.tokenizer_hash + "; they do not belong together");
  }
  VerifyReport report;
  report.vocab_size = options.vocab_size > 0 ? options.vocab_size : (meta ? meta->vocab_size : 0);
  if (report.vocab_size <= 0) return report;
  std::vector<int32_t> buffer;
  for (size_t seq = 0; seq < dataset.num_sequences(); ++seq) {
    MS_RETURN_IF_ERROR(check_sequence_ids(dataset, seq, report.vocab_size, &buffer));
  }
  report.tokens_checked = dataset.total_tokens();
  return report;
}

}  // namespace ms::data
