// Context-parallel layout arithmetic, free of MPI: how a sequence of T tokens is cut over a cp
// group. The sequence is cut into 2 cp chunks of c = T / (2 cp) tokens and rank r holds chunks
// r and 2cp-1-r, in that order, so under a causal mask every rank does the same attention work
// (an early chunk with few visible keys paired with a late one with many; Megatron-LM and
// ByteScale balance it the same way). A rank's local sequence is therefore two contiguous runs
// of global positions: [r c, (r + 1) c) and [(2cp-1-r) c, (2cp-r) c).
#pragma once

#include <cstdint>
#include <vector>

namespace ms::parallel {

// The global position of each of rank `rank`'s T / cp local tokens, in local order. Requires
// cp >= 1, 0 <= rank < cp and T divisible by 2 cp (asserted).
std::vector<int64_t> cp_positions(int64_t T, int cp, int rank);

// rows: (B, T) values of a whole sequence -> out: (B, T / cp), rank `rank`'s local tokens in
// local order (cp_positions).
template <typename V>
void cp_take(const V* rows, int64_t B, int64_t T, int cp, int rank, V* out);

extern template void cp_take<int32_t>(const int32_t*, int64_t, int64_t, int, int, int32_t*);
extern template void cp_take<int64_t>(const int64_t*, int64_t, int64_t, int, int, int64_t*);

}  // namespace ms::parallel
