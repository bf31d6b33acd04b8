// Token embedding lookup (a row gather) and its backward (a scatter-add into the table).
// The backward splits the work by embedding columns, so each table element is summed by one
// thread in token order: deterministic whatever the thread count.
#pragma once

#include <cstdint>

namespace ms::ops {

// ids: (n) in [0, vocab) (the caller validates); table: (vocab, d); out: (n, d) = table[ids].
void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n, int64_t d);

// dout: (n, d); dtable: (vocab, d) accumulates dout[i] into row ids[i] for every i.
void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                        int64_t d);

// The vocabulary-parallel forms: `table` holds the rows of ids [first, first + count) only.
// Forward: out[i] = that row for a held id, zero otherwise. Backward: dout[i] accumulates into
// the held rows; rows of ids not held are untouched.
void embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                             int64_t d, int64_t first, int64_t count);
void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                              int64_t d, int64_t first, int64_t count);

}  // namespace ms::ops
