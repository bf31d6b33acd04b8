// Paged attention (ops/paged_attention.h) against a plain reference: each query's visible
// positions gathered into contiguous keys and values, scored and soft-maxed in double. Covers
// grouped-query heads, a sliding window, block tables that are not in order and do not start
// at block 0, document starts, head sizes that are not a multiple of the dot product's lanes,
// and that a decode call (one query) gives bitwise the row of the prefill call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/philox.h"
#include "ops/paged_attention.h"

namespace ms::ops {
namespace {

using Floats = std::vector<float>;

Floats random(size_t n, uint64_t seed) {
  Floats v(n);
  for (size_t i = 0; i < n; ++i) v[i] = -1.0f + 2.0f * uniform(seed, 0, i);
  return v;
}

struct Case {
  const char* name;
  int64_t heads, kv_heads, head_dim, block_size, window;
  // Two sequences: their block tables (into a cache of kNumBlocks) and lengths, and where
  // the documents of each start (every position from doc_start on sees back to it).
  std::vector<int32_t> blocks_a, blocks_b;
  int64_t len_a, len_b, doc_a, doc_b;
};

constexpr int64_t kNumBlocks = 9;

// Position pos of a sequence, kv head h: where it lives in the cache.
int64_t cache_index(const Case& c, const std::vector<int32_t>& blocks, int64_t pos, int64_t h) {
  return ((blocks[pos / c.block_size] * c.kv_heads + h) * c.block_size + pos % c.block_size) *
         c.head_dim;
}

class PagedAttentionTest : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttentionTest, MatchesGatheredReferenceAndDecodeMatchesPrefill) {
  const Case& c = GetParam();
  const int64_t hd = c.head_dim, kvd = c.kv_heads * hd, qd = c.heads * hd;
  // Every position of both sequences is a query token of one call (a prefill of both).
  std::vector<PagedQuery> queries;
  std::vector<const std::vector<int32_t>*> table_of;
  for (int64_t p = 0; p < c.len_a; ++p) {
    queries.push_back({p, c.blocks_a.data(), p >= c.doc_a ? c.doc_a : 0});
    table_of.push_back(&c.blocks_a);
  }
  for (int64_t p = 0; p < c.len_b; ++p) {
    queries.push_back({p, c.blocks_b.data(), p >= c.doc_b ? c.doc_b : 0});
    table_of.push_back(&c.blocks_b);
  }
  const int64_t n = static_cast<int64_t>(queries.size());
  PagedAttentionShape s;
  s.tokens = n;
  s.heads = c.heads;
  s.kv_heads = c.kv_heads;
  s.head_dim = hd;
  s.block_size = c.block_size;
  s.window = c.window;

  const Floats q = random(n * qd, 1), k = random(n * kvd, 2), v = random(n * kvd, 3);
  const size_t cache_size = static_cast<size_t>(kNumBlocks * kvd * c.block_size);
  Floats k_cache(cache_size, NAN), v_cache(cache_size, NAN);  // unwritten slots poison
  paged_kv_store(s, queries.data(), k.data(), v.data(), k_cache.data(), v_cache.data());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t h = 0; h < c.kv_heads; ++h) {
      const int64_t at = cache_index(c, *table_of[t], queries[t].pos, h);
      for (int64_t d = 0; d < hd; ++d) {
        ASSERT_EQ(k_cache[at + d], k[t * kvd + h * hd + d]) << "token " << t << " head " << h;
        ASSERT_EQ(v_cache[at + d], v[t * kvd + h * hd + d]) << "token " << t << " head " << h;
      }
    }
  }

  Floats out(n * qd, NAN);
  paged_attention(s, queries.data(), q.data(), k_cache.data(), v_cache.data(), out.data());

  const int64_t group = c.heads / c.kv_heads;
  for (int64_t t = 0; t < n; ++t) {
    const PagedQuery& query = queries[t];
    int64_t first = query.first;
    if (c.window > 0) first = std::max(first, query.pos - c.window + 1);
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t kvh = h / group;
      // The visible keys and values, gathered in position order.
      std::vector<double> keys, values;
      for (int64_t p = first; p <= query.pos; ++p) {
        const int64_t at = cache_index(c, *table_of[t], p, kvh);
        keys.insert(keys.end(), k_cache.begin() + at, k_cache.begin() + at + hd);
        values.insert(values.end(), v_cache.begin() + at, v_cache.begin() + at + hd);
      }
      const int64_t len = query.pos - first + 1;
      std::vector<double> scores(len);
      double max_score = -INFINITY;
      for (int64_t j = 0; j < len; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += q[t * qd + h * hd + d] * keys[j * hd + d];
        scores[j] = dot / std::sqrt(static_cast<double>(hd));
        max_score = std::max(max_score, scores[j]);
      }
      double total = 0;
      for (double& sc : scores) total += (sc = std::exp(sc - max_score));
      for (int64_t d = 0; d < hd; ++d) {
        double want = 0;
        for (int64_t j = 0; j < len; ++j) want += scores[j] / total * values[j * hd + d];
        ASSERT_NEAR(out[t * qd + h * hd + d], want, 2e-6)
            << c.name << " token " << t << " head " << h << " dim " << d;
      }
    }
  }

  // Each token alone (a decode step of that token) gives bitwise its row of the prefill.
  PagedAttentionShape one = s;
  one.tokens = 1;
  for (int64_t t = 0; t < n; ++t) {
    Floats row(qd, NAN);
    paged_attention(one, &queries[t], q.data() + t * qd, k_cache.data(), v_cache.data(),
                    row.data());
    ASSERT_EQ(std::memcmp(row.data(), out.data() + t * qd, qd * sizeof(float)), 0)
        << c.name << " token " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PagedAttentionTest,
    ::testing::Values(
        // Grouped-query heads over scrambled block tables.
        Case{"gqa", 4, 2, 8, 4, 0, {5, 2, 7}, {1, 8, 3, 0}, 10, 14, 0, 0},
        // One kv head for all query heads, head_dim not a multiple of the 8 lanes.
        Case{"mqa_odd_dim", 6, 1, 13, 3, 0, {4, 0, 6, 2}, {8, 7, 1, 3, 5}, 11, 15, 0, 0},
        // A sliding window shorter than a block and crossing block boundaries.
        Case{"window", 4, 4, 8, 4, 3, {3, 1, 6}, {0, 8, 2, 4}, 12, 13, 0, 0},
        // Document starts inside a block, with a window longer than some documents.
        Case{"documents", 4, 2, 16, 5, 7, {6, 4}, {2, 0, 7}, 9, 14, 4, 11},
        // Document starts without a window.
        Case{"documents_no_window", 2, 1, 8, 4, 0, {7, 3, 5}, {1, 0, 8}, 12, 10, 6, 3}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ms::ops
