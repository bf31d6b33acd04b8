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

}  // namespace ms::ops
