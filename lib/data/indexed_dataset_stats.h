// What `ms-data inspect` and `ms-data verify` compute over an open IndexedDataset: document
// length statistics with a log2 histogram, and a full check that the .bin matches the index
// exactly and that every token id is inside the vocabulary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/indexed_dataset.h"

namespace ms::data {

struct LengthBucket {
  uint64_t lo = 0;  // inclusive
  uint64_t hi = 0;  // inclusive
  uint64_t count = 0;
};

struct DatasetStats {
  uint64_t documents = 0;
  uint64_t sequences = 0;
  uint64_t tokens = 0;
  uint64_t min_document_tokens = 0;
  uint64_t max_document_tokens = 0;
  double mean_document_tokens = 0.0;
  // Documents by token count: bucket 0 holds length 0, bucket k >= 1 holds [2^(k-1), 2^k - 1].
  // Trailing empty buckets are omitted.
  std::vector<LengthBucket> histogram;
};

// Statistics over the documents of `dataset` (reads the index only).
DatasetStats compute_dataset_stats(const IndexedDataset& dataset);

// The unigram distribution of a dataset's tokens: the cross-entropy a model that ignores
// context would reach, the yardstick a training loss (in nats) has to fall below.
struct UnigramStats {
  uint64_t tokens = 0;
  uint64_t distinct_ids = 0;
  double entropy_nats = 0.0;  // -sum p log p over the ids' frequencies
};

// Reads every token once (in fixed-size chunks, so memory grows with the distinct ids only).
UnigramStats compute_unigram_stats(const IndexedDataset& dataset);

struct VerifyOptions {
  // Ids must be below this; 0 takes the sidecar's vocab_size, and with no sidecar the id check
  // is skipped (verify reports that it did so).
  int64_t vocab_size = 0;
  // When set, the sidecar's tokenizer hash must equal it.
  std::optional<std::string> tokenizer_hash;
};

struct VerifyReport {
  uint64_t tokens_checked = 0;
  int64_t vocab_size = 0;  // the bound used; 0 when ids were not checked
};

// Checks what open() leaves out because it needs the .bin contents or a vocabulary: the .bin
// size equals the end of the last sequence (no trailing bytes), every token id lies in
// [0, vocab_size), and the tokenizer hash matches. Corruption naming the first problem (file,
// sequence, document, position, id) otherwise.
Result<VerifyReport> verify_dataset(const IndexedDataset& dataset, const VerifyOptions& options);

}  // namespace ms::data
