// Gather and scatter-add over rows of an embedding table.
#include "ops/embedding.h"

#include <cstring>

#include "ops/parallel.h"

namespace ms::ops {

void embedding_forward(const int32_t* ids, const float* table, float* out, int64_t n,
                       int64_t d) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      std::memcpy(out + i * d, table + static_cast<int64_t>(ids[i]) * d, sizeof(float) * d);
    }
  }, 16);
}

void embedding_backward(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                        int64_t d) {
  parallel_for(d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      float* row = dtable + static_cast<int64_t>(ids[i]) * d;
      const float* g = dout + i * d;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }, 64);
}

void embedding_forward_range(const int32_t* ids, const float* table, float* out, int64_t n,
                             int64_t d, int64_t first, int64_t count) {
  parallel_for(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float* row = out + i * d;
      const int64_t local = static_cast<int64_t>(ids[i]) - first;
      if (local >= 0 && local < count) {
        std::memcpy(row, table + local * d, sizeof(float) * d);
      } else {
        std::memset(row, 0, sizeof(float) * d);
      }
    }
  }, 16);
}

void embedding_backward_range(const int32_t* ids, const float* dout, float* dtable, int64_t n,
                              int64_t d, int64_t first, int64_t count) {
  parallel_for(d, [&](int64_t c0, int64_t c1) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t local = static_cast<int64_t>(ids[i]) - first;
      if (local < 0 || local >= count) continue;
      float* row = dtable + local * d;
      const float* g = dout + i * d;
      for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }, 64);
}

}  // namespace ms::ops
