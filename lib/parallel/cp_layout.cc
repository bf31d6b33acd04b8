// Context-parallel layout arithmetic (cp_layout.h).
#include "parallel/cp_layout.h"

#include <cassert>
#include <cstddef>

namespace ms::parallel {

std::vector<int64_t> cp_positions(int64_t T, int cp, int rank) {
  assert(cp >= 1 && rank >= 0 && rank < cp && T % (2 * cp) == 0);
  const int64_t c = T / (2 * cp);
  std::vector<int64_t> out(static_cast<size_t>(2 * c));
  for (int64_t j = 0; j < c; ++j) {
    out[static_cast<size_t>(j)] = rank * c + j;
    out[static_cast<size_t>(c + j)] = (2 * cp - 1 - rank) * c + j;
  }
  return out;
}

template <typename V>
void cp_take(const V* rows, int64_t B, int64_t T, int cp, int rank, V* out) {
  const std::vector<int64_t> at = cp_positions(T, cp, rank);
  const int64_t local = static_cast<int64_t>(at.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < local; ++j) {
      out[b * local + j] = rows[b * T + at[static_cast<size_t>(j)]];
    }
  }
}

template void cp_take<int32_t>(const int32_t*, int64_t, int64_t, int, int, int32_t*);
template void cp_take<int64_t>(const int64_t*, int64_t, int64_t, int, int, int64_t*);

}  // namespace ms::parallel
