// The host half of the deterministic embedding backward on the GPU: token indices grouped by
// the table row their id selects, so kernels::embedding_backward_grouped can give each touched
// row to one block that sums the row's tokens in increasing token order (no atomics, and the
// same order as ops::embedding_backward, hence the same bits). The token ids live in host
// memory in the caller (the batch), so the grouping is built there and uploaded. Plain C++.
#pragma once

#include <cstdint>
#include <vector>

namespace ms::kernels {

struct EmbeddingGrouping {
  // The distinct table rows touched, increasing, relative to `first` (row ids[i] - first).
  std::vector<int32_t> rows;
  // rows.size() + 1 offsets into `tokens`: row rows[g]'s tokens are tokens[starts[g],
  // starts[g + 1]). starts[0] is 0 and starts.back() is tokens.size().
  std::vector<int64_t> starts;
  // Token indices (positions in ids), increasing within each row.
  std::vector<int64_t> tokens;

  int64_t groups() const { return static_cast<int64_t>(rows.size()); }
};

// Groups the tokens i < n by ids[i] - first, keeping only ids in [first, first + count) (the
// vocabulary-parallel shard, first >= 0; first = 0 and count = vocab for the whole table). ids
// is a host array. Returns empty rows and tokens, and starts = {0}, when nothing is held.
EmbeddingGrouping group_tokens_by_row(const int32_t* ids, int64_t n, int64_t first,
                                      int64_t count);

}  // namespace ms::kernels
