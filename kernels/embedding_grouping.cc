// Grouping token indices by embedding row: a sort of (row, token) pairs, so tokens come out in
// increasing order within each row whatever the sort's stability.
#include "kernels/embedding_grouping.h"

#include <algorithm>
#include <utility>

namespace ms::kernels {

EmbeddingGrouping group_tokens_by_row(const int32_t* ids, int64_t n, int64_t first,
                                      int64_t count) {
  std::vector<std::pair<int64_t, int64_t>> held;  // (row relative to first, token)
  held.reserve(n > 0 ? static_cast<size_t>(n) : 0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t local = static_cast<int64_t>(ids[i]) - first;
    if (local >= 0 && local < count) held.emplace_back(local, i);
  }
  std::sort(held.begin(), held.end());

  EmbeddingGrouping g;
  g.tokens.reserve(held.size());
  for (const auto& [row, token] : held) {
    if (g.rows.empty() || g.rows.back() != row) {  // a new group starts here
      g.starts.push_back(static_cast<int64_t>(g.tokens.size()));
      g.rows.push_back(static_cast<int32_t>(row));
    }
    g.tokens.push_back(token);
  }
  g.starts.push_back(static_cast<int64_t>(g.tokens.size()));
  return g;
}

}  // namespace ms::kernels
