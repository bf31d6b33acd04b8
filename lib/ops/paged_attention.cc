// Paged decode attention and the cache store; see paged_attention.h. Moved here from
// model/inference.cc unchanged in its arithmetic, so serving's results did not move.
#include "ops/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu_dispatch.h"
#include "ops/parallel.h"

namespace ms::ops {
namespace {

// Offset of (position pos, kv head 0) of q's sequence in a layer's cache; kv head h of that
// position is h * kv_head_stride(s) further on.
int64_t cache_offset(const PagedAttentionShape& s, const PagedQuery& q, int64_t pos) {
  const int64_t block = q.blocks[pos / s.block_size];
  return (block * s.kv_heads * s.block_size + pos % s.block_size) * s.head_dim;
}

int64_t kv_head_stride(const PagedAttentionShape& s) { return s.block_size * s.head_dim; }

// a . b over one head's n values in kLanes interleaved partial sums, added in a fixed order at
// the end. One running sum made every score wait on the latency of n dependent adds (the
// compiler may not reorder float sums), and `perf` showed attention as a large share of a
// decode step at a few hundred cached positions; independent lanes let it vectorize. The
// result depends only on n, not on the batch or the thread, so decode stays bitwise equal to
// prefill. Always inlined, so that it vectorizes for the caller's clone (MS_CLONES_AVX2).
[[gnu::always_inline]] inline float head_dot(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 8;
  float part[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) part[j] += a[i + j] * b[i + j];
  }
  for (; i < n; ++i) part[i % kLanes] += a[i] * b[i];
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

// o += p * v over one head's n values, eight at a time, with restrict-qualified pointers: as a
// plain loop in attend_group the compiler kept it scalar (at -O2 GCC vectorizes only loops that
// need no alias check and no remainder loop), and `perf` put two thirds of attention's time on
// it (docs/bench/infer.md). Each value is one multiply and one add either way, so the vector
// form gives the same bits. Always inlined, so that it vectorizes for the caller's clone
// (MS_CLONES_AVX2).
[[gnu::always_inline]] inline void add_scaled(float* __restrict o, const float* __restrict v,
                                              float p, int64_t n) {
  constexpr int64_t kLanes = 8;
  int64_t d = 0;
  for (; d + kLanes <= n; d += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) o[d + j] += p * v[d + j];
  }
  for (; d < n; ++d) o[d] += p * v[d];
}

// Offsets (of kv head 0) of positions first .. last of q's sequence in a layer's cache, walked
// block by block (no division per position).
void cached_offsets(const PagedAttentionShape& s, const PagedQuery& q, int64_t first,
                    int64_t last, std::vector<int64_t>& offsets) {
  const int64_t hd = s.head_dim;
  offsets.clear();
  for (int64_t j = first; j <= last;) {
    const int64_t in_block = j % s.block_size;
    const int64_t n = std::min(s.block_size - in_block, last - j + 1);
    const int64_t start = cache_offset(s, q, j);
    for (int64_t i = 0; i < n; ++i) offsets.push_back(start + i * hd);
    j += n;
  }
}

// Asks for one head's row of keys or values (hd floats) ahead of its use. Within a block a kv
// head's positions are contiguous, which the hardware prefetchers follow; this covers the jump
// to the next block, which can lie anywhere in the arena.
void prefetch_head_row(const float* row, int64_t hd) {
  constexpr int64_t kLineFloats = 64 / sizeof(float);
  for (int64_t d = 0; d < hd; d += kLineFloats) __builtin_prefetch(row + d);
}

// Positions ahead that the passes below prefetch: enough to cover a memory latency with the
// work of a few positions of a GQA group.
constexpr int64_t kPrefetchAhead = 8;

// Scratch one thread of paged_attention reuses across its tasks.
struct AttendScratch {
  std::vector<int64_t> offsets;
  std::vector<float> values;
};

// `group` query heads that share kv head kvh (all of them, or a run of them), of one token,
// over its sequence's cached keys/values: q and out (group, hd), contiguous since head h reads
// kv head h / (heads / kv_heads). One pass over the keys scores every head of the group and
// one pass over the values sums them, so a decode step reads the cache once per kv head, not
// once per query head. Each head's sums run in the same order as for a lone head. Cloned for
// AVX2 where the compiler can (the loops vectorize; FP contraction is off, so both clones give
// the same bits).
MS_CLONES_AVX2
void attend_group(const PagedAttentionShape& s, const PagedQuery& t, const float* q,
                  const float* kc, const float* vc, int64_t kvh, int64_t group, float* out,
                  AttendScratch& scratch) {
  const int64_t first = s.window > 0 ? std::max(t.first, t.pos - s.window + 1) : t.first;
  const int64_t len = t.pos - first + 1, hd = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  cached_offsets(s, t, first, t.pos, scratch.offsets);
  const int64_t* offsets = scratch.offsets.data();
  // The group's scores (group, len), then each head's max and sum.
  scratch.values.resize(static_cast<size_t>(group * (len + 2)));
  float* scores = scratch.values.data();
  float* max_score = scores + group * len;
  float* sum = max_score + group;
  const float* k_head = kc + kvh * kv_head_stride(s);
  const float* v_head = vc + kvh * kv_head_stride(s);
  std::fill(max_score, max_score + group, -INFINITY);
  for (int64_t i = 0; i < len; ++i) {
    if (i + kPrefetchAhead < len) prefetch_head_row(k_head + offsets[i + kPrefetchAhead], hd);
    const float* k = k_head + offsets[i];
    for (int64_t g = 0; g < group; ++g) {
      const float score = head_dot(q + g * hd, k, hd) * scale;
      scores[g * len + i] = score;
      max_score[g] = std::max(max_score[g], score);
    }
  }
  std::fill(out, out + group * hd, 0.0f);
  std::fill(sum, sum + group, 0.0f);
  for (int64_t i = 0; i < len; ++i) {
    if (i + kPrefetchAhead < len) prefetch_head_row(v_head + offsets[i + kPrefetchAhead], hd);
    const float* v = v_head + offsets[i];
    for (int64_t g = 0; g < group; ++g) {
      const float p = std::exp(scores[g * len + i] - max_score[g]);
      sum[g] += p;
      add_scaled(out + g * hd, v, p, hd);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t d = 0; d < hd; ++d) out[g * hd + d] /= sum[g];
  }
}

}  // namespace

void paged_kv_store(const PagedAttentionShape& s, const PagedQuery* queries, const float* k,
                    const float* v, float* k_cache, float* v_cache) {
  const int64_t hd = s.head_dim, kvd = s.kv_heads * hd;
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t at = cache_offset(s, queries[t], queries[t].pos);
    for (int64_t h = 0; h < s.kv_heads; ++h) {
      const int64_t from = t * kvd + h * hd, to = at + h * kv_head_stride(s);
      std::copy(k + from, k + from + hd, k_cache + to);
      std::copy(v + from, v + from + hd, v_cache + to);
    }
  }
}

// A task is a token's kv head with its group of query heads, or a part of that group when there
// are fewer (token, kv head) pairs than threads (one decode token of a model with few kv heads).
void paged_attention(const PagedAttentionShape& s, const PagedQuery* queries, const float* q,
                     const float* k_cache, const float* v_cache, float* out) {
  const int64_t pairs = s.tokens * s.kv_heads;
  const int64_t group = s.heads / s.kv_heads;
  const int64_t parts =
      std::clamp<int64_t>(num_threads() / std::max<int64_t>(pairs, 1), 1, group);
  const int64_t per_part = (group + parts - 1) / parts;
  parallel_for(pairs * parts, [&](int64_t begin, int64_t end) {
    AttendScratch scratch;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t pair = task / parts, g0 = (task % parts) * per_part;
      const int64_t heads = std::min(group, g0 + per_part) - g0;
      if (heads <= 0) continue;
      const int64_t token = pair / s.kv_heads, kvh = pair % s.kv_heads;
      const int64_t row = (token * s.heads + kvh * group + g0) * s.head_dim;
      attend_group(s, queries[token], q + row, k_cache, v_cache, kvh, heads, out + row,
                   scratch);
    }
  });
}

}  // namespace ms::ops
