// Optimal-string-alignment distance over three rolling rows; names are short, so the quadratic
// cost is irrelevant and clarity wins.
#include "config/suggest.h"

#include <algorithm>

namespace ms::config {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = b.size();
  std::vector<std::size_t> before_prev(n + 1), prev(n + 1), cur(n + 1);
  for (std::size_t j = 0; j <= n; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const std::size_t substitute = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, substitute});
      const bool swapped = i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1];
      if (swapped) cur[j] = std::min(cur[j], before_prev[j - 2] + 1);
    }
    before_prev.swap(prev);
    prev.swap(cur);
  }
  return prev[n];
}

std::optional<std::string> closest_match(std::string_view typed,
                                         const std::vector<std::string>& candidates) {
  const std::size_t max_distance = std::min<std::size_t>(3, 1 + typed.size() / 4);
  std::optional<std::string> best;
  std::size_t best_distance = max_distance + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t d = edit_distance(typed, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

}  // namespace ms::config
