// Block attention (ops/attention.h) as a context-parallel ring uses it: a packed sequence of T
// tokens is cut into 2 cp chunks, "rank" r holds chunks r and 2cp-1-r (two contiguous runs),
// and each rank's queries are computed against every rank's keys one block at a time, merged
// with attention_merge in any order. The merged result must equal a double-precision
// brute-force reference (tests/ops/reference_ops.h) of the whole sequence, and the block
// backward summed over the key blocks must equal the one-block backward and central
// differences of the reference, under causal, sliding-window and document masks, with grouped
// query heads, tiles that straddle the runs, and blocks of unequal length.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ops/attention.h"
#include "tests/ops/guarded.h"
#include "tests/ops/reference_ops.h"

namespace ms::ops {
namespace {

namespace ref = ms::test::ref;
using Positions = std::vector<int64_t>;
constexpr float kNegInf = -INFINITY;

// A global problem: batch rows of T tokens, document ids per (row, token) or none.
struct Problem {
  int64_t B = 2, T = 26, H = 4, KVH = 2, hd = 4, window = 0, block = 4;
  std::vector<int64_t> docs;  // (B, T) or empty
  std::vector<float> q, k, v, dout;

  Problem(int64_t window_, bool with_docs, uint64_t seed) : window(window_) {
    std::mt19937_64 rng(seed);
    q = test::random_floats(size_t(B * T * H * hd), rng, -2, 2);
    k = test::random_floats(size_t(B * T * KVH * hd), rng, -2, 2);
    v = test::random_floats(size_t(B * T * KVH * hd), rng, -1, 1);
    dout = test::random_floats(q.size(), rng, -1, 1);
    if (with_docs) {
      // Row 0: documents of 7, 12 and 7 tokens; row 1: 1, 15, 10 (a one-token document).
      const std::vector<std::vector<int64_t>> lengths{{7, 12, 7}, {1, 15, 10}};
      for (const auto& row : lengths) {
        for (size_t d = 0; d < row.size(); ++d) docs.insert(docs.end(), size_t(row[d]), int64_t(d));
      }
    }
  }
  AttentionShape shape(int64_t tq, int64_t tk) const {
    AttentionShape s;
    s.batch = B;
    s.seq = tq;
    s.heads = H;
    s.kv_heads = KVH;
    s.head_dim = hd;
    s.window = window;
    s.block = block;
    s.kv_seq = tk;
    return s;
  }
};

// Rows `pos` of every batch row of x: (B, T, width) -> (B, |pos|, width).
std::vector<float> gather(const std::vector<float>& x, int64_t B, int64_t T, int64_t width,
                          const Positions& pos) {
  std::vector<float> out;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t p : pos) {
      const float* row = x.data() + (b * T + p) * width;
      out.insert(out.end(), row, row + width);
    }
  }
  return out;
}

void scatter_add(const std::vector<float>& part, int64_t B, int64_t T, int64_t width,
                 const Positions& pos, std::vector<float>& x) {
  const int64_t n = static_cast<int64_t>(pos.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < width; ++c) {
        x[(b * T + pos[i]) * width + c] += part[(b * n + i) * width + c];
      }
    }
  }
}

Positions range(int64_t lo, int64_t hi) {
  Positions p(size_t(hi - lo));
  std::iota(p.begin(), p.end(), lo);
  return p;
}

// The cp layout: chunk c of 2 cp covers [c T / 2cp, (c + 1) T / 2cp); rank r holds r, 2cp-1-r.
std::vector<Positions> cp_blocks(int64_t T, int64_t cp) {
  std::vector<Positions> out;
  const auto chunk = [&](int64_t c) { return range(c * T / (2 * cp), (c + 1) * T / (2 * cp)); };
  for (int64_t r = 0; r < cp; ++r) {
    Positions p = chunk(r);
    const Positions tail = chunk(2 * cp - 1 - r);
    p.insert(p.end(), tail.begin(), tail.end());
    out.push_back(p);
  }
  return out;
}

// A block's indices and document ids, as the mask reads them ((B, |pos|) each).
struct BlockIds {
  std::vector<int64_t> index, doc;
  std::vector<int32_t> doc32;
  BlockIds(const Problem& p, const Positions& pos) {
    for (int64_t b = 0; b < p.B; ++b) {
      for (int64_t t : pos) {
        index.push_back(t);
        if (!p.docs.empty()) doc.push_back(p.docs[b * p.T + t]);
      }
    }
    doc32.assign(doc.begin(), doc.end());
  }
};

// The mask of queries qi against keys ki; documents as int32 or int64 ids.
AttentionMask mask_of(const BlockIds& qi, const BlockIds& ki, bool wide_docs) {
  AttentionMask m;
  m.q_index = qi.index.data();
  m.k_index = ki.index.data();
  if (!qi.doc.empty()) {
    if (wide_docs) {
      m.q_doc.i64 = qi.doc.data();
      m.k_doc.i64 = ki.doc.data();
    } else {
      m.q_doc.i32 = qi.doc32.data();
      m.k_doc.i32 = ki.doc32.data();
    }
  }
  return m;
}

struct Merged {
  std::vector<float> out, lse;
};

// Queries `qpos` against the key blocks in the given order, merged.
Merged forward_blocks(const Problem& p, const Positions& qpos,
                      const std::vector<Positions>& key_blocks, bool wide_docs) {
  const int64_t tq = static_cast<int64_t>(qpos.size());
  const BlockIds qi(p, qpos);
  const std::vector<float> q = gather(p.q, p.B, p.T, p.H * p.hd, qpos);
  Merged acc{std::vector<float>(q.size(), 0.0f),
             std::vector<float>(size_t(p.B * p.H * tq), kNegInf)};
  for (const Positions& kpos : key_blocks) {
    const int64_t tk = static_cast<int64_t>(kpos.size());
    const BlockIds ki(p, kpos);
    const std::vector<float> k = gather(p.k, p.B, p.T, p.KVH * p.hd, kpos);
    const std::vector<float> v = gather(p.v, p.B, p.T, p.KVH * p.hd, kpos);
    test::Guarded<float> out(q.size()), lse(acc.lse.size());
    attention_block_forward(p.shape(tq, tk), mask_of(qi, ki, wide_docs), q.data(), k.data(),
                            v.data(), out.data(), lse.data());
    EXPECT_TRUE(out.guards_intact() && lse.guards_intact()) << "block forward wrote outside";
    attention_merge(p.shape(tq, tk), out.data(), lse.data(), acc.out.data(), acc.lse.data());
  }
  return acc;
}

struct Reference {
  ref::Vec out, lse;
};

Reference reference(const Problem& p, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v) {
  const Positions all = range(0, p.T);
  std::vector<int64_t> index;
  for (int64_t b = 0; b < p.B; ++b) index.insert(index.end(), all.begin(), all.end());
  Reference r;
  r.out = ref::masked_attention(ref::Vec(q.begin(), q.end()), ref::Vec(k.begin(), k.end()),
                                ref::Vec(v.begin(), v.end()),
                                {p.B, p.T, p.T, p.H, p.KVH, p.hd, p.window}, index, index, p.docs,
                                p.docs, &r.lse);
  return r;
}

// Every rank's merged forward, scattered back to global (B, T, H, hd) and lse (B, H, T).
Merged forward_all(const Problem& p, const std::vector<Positions>& q_blocks,
                   const std::vector<Positions>& k_blocks, bool reverse, bool wide_docs) {
  Merged global{std::vector<float>(p.q.size(), 0.0f),
                std::vector<float>(size_t(p.B * p.H * p.T), 0.0f)};
  for (const Positions& qpos : q_blocks) {
    std::vector<Positions> order = k_blocks;
    if (reverse) std::reverse(order.begin(), order.end());
    const Merged m = forward_blocks(p, qpos, order, wide_docs);
    scatter_add(m.out, p.B, p.T, p.H * p.hd, qpos, global.out);
    const int64_t tq = static_cast<int64_t>(qpos.size());
    for (int64_t bh = 0; bh < p.B * p.H; ++bh) {
      for (int64_t i = 0; i < tq; ++i) global.lse[bh * p.T + qpos[i]] = m.lse[bh * tq + i];
    }
  }
  return global;
}

void expect_near_all(const std::vector<float>& got, const ref::Vec& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " [" << i << "]";
    } else {
      ASSERT_NEAR(got[i], want[i], tol) << what << " [" << i << "]";
    }
  }
}

struct MaskCase {
  std::string name;
  int64_t window;
  bool docs;
};

const std::vector<MaskCase> kMasks{
    {"causal", 0, false}, {"window", 5, false}, {"docs", 0, true}, {"docs_window", 6, true}};

// The splits of the keys (and of the queries) a ring produces, and uneven contiguous ones.
std::vector<std::pair<std::string, std::vector<Positions>>> splits(int64_t T) {
  return {{"cp2", cp_blocks(T, 2)},
          {"cp3", cp_blocks(T, 3)},
          {"cp4", cp_blocks(T, 4)},
          {"uneven3", {range(0, 7), range(7, 19), range(19, T)}}};
}

TEST(AttentionBlock, MergedKeyBlocksMatchTheReference) {
  for (const MaskCase& mc : kMasks) {
    const Problem p(mc.window, mc.docs, 11);
    const Reference want = reference(p, p.q, p.k, p.v);
    for (const auto& [name, blocks] : splits(p.T)) {
      for (bool reverse : {false, true}) {
        const std::string what = mc.name + " " + name + (reverse ? " reversed" : "");
        const Merged got = forward_all(p, blocks, blocks, reverse, reverse);
        expect_near_all(got.out, want.out, 1e-5, what + " out");
        expect_near_all(got.lse, want.lse, 1e-5, what + " lse");
      }
    }
  }
}

// Queries of one rank against keys split another way: Tq != Tk in every call.
TEST(AttentionBlock, QueriesAndKeysSplitDifferently) {
  const Problem p(4, true, 12);
  const Reference want = reference(p, p.q, p.k, p.v);
  const Merged got = forward_all(p, cp_blocks(p.T, 2), cp_blocks(p.T, 4), false, false);
  expect_near_all(got.out, want.out, 1e-5, "out");
  expect_near_all(got.lse, want.lse, 1e-5, "lse");
}

// The plain entry points are the block call at indices 0..T-1, bit for bit.
TEST(AttentionBlock, PlainAttentionIsThePositionalBlock) {
  const Problem p(5, false, 13);
  const BlockIds all(p, range(0, p.T));
  std::vector<float> out1(p.q.size()), lse1(size_t(p.B * p.H * p.T));
  std::vector<float> out2 = out1, lse2 = lse1;
  attention_forward(p.shape(p.T, 0), p.q.data(), p.k.data(), p.v.data(), out1.data(),
                    lse1.data());
  attention_block_forward(p.shape(p.T, p.T), mask_of(all, all, false), p.q.data(), p.k.data(),
                          p.v.data(), out2.data(), lse2.data());
  EXPECT_EQ(out1, out2);
  EXPECT_EQ(lse1, lse2);
}

// Queries that see none of a block's keys (all later, or of another document): lse -inf and
// out 0 from the block, the accumulator untouched by the merge, and no gradient from it.
TEST(AttentionBlock, RowsThatSeeNothing) {
  for (const MaskCase& mc : kMasks) {
    const Problem p(mc.window, mc.docs, 14);
    // Keys 20..25 are after every query 0..5; with documents, queries 19..24 (document 2 in
    // both rows) come after keys 2..6 (document 0 in row 0, 1 in row 1).
    const Positions qpos = mc.docs ? range(19, 25) : range(0, 6);
    const Positions kpos = mc.docs ? range(2, 7) : range(20, 26);
    const int64_t tq = 6, tk = static_cast<int64_t>(kpos.size());
    const BlockIds qi(p, qpos), ki(p, kpos);
    const std::vector<float> q = gather(p.q, p.B, p.T, p.H * p.hd, qpos);
    const std::vector<float> k = gather(p.k, p.B, p.T, p.KVH * p.hd, kpos);
    const std::vector<float> v = gather(p.v, p.B, p.T, p.KVH * p.hd, kpos);
    std::vector<float> out(q.size(), 1.0f), lse(size_t(p.B * p.H * tq), 1.0f);
    attention_block_forward(p.shape(tq, tk), mask_of(qi, ki, true), q.data(), k.data(),
                            v.data(), out.data(), lse.data());
    for (float x : out) ASSERT_EQ(x, 0.0f) << mc.name;
    for (float x : lse) ASSERT_EQ(x, kNegInf) << mc.name;
    std::vector<float> acc_out(q.size(), 0.5f), acc_lse(lse.size(), 0.25f);
    attention_merge(p.shape(tq, tk), out.data(), lse.data(), acc_out.data(), acc_lse.data());
    for (float x : acc_out) ASSERT_EQ(x, 0.5f) << mc.name;
    for (float x : acc_lse) ASSERT_EQ(x, 0.25f) << mc.name;
    // Backward with a final lse of -inf (a row that saw nothing anywhere) and with a finite
    // one (it saw keys elsewhere): this block adds nothing either way.
    for (float final_lse : {kNegInf, 0.3f}) {
      std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
      const std::vector<float> fin(lse.size(), final_lse), dout(q.size(), 1.0f);
      attention_block_backward(p.shape(tq, tk), mask_of(qi, ki, true), q.data(), k.data(),
                               v.data(), out.data(), fin.data(), dout.data(), dq.data(),
                               dk.data(), dv.data());
      for (const auto* g : {&dq, &dk, &dv}) {
        for (float x : *g) ASSERT_EQ(x, 0.0f) << mc.name;
      }
    }
  }
}

// Rows that see nothing sharing a tile with rows that do: queries 0, 1, 2 precede every key,
// queries 10..12 see keys 5..9; the per-element mask runs and must not produce NaN.
TEST(AttentionBlock, BlindRowsInsideAPartlyVisibleTile) {
  const Problem p(0, false, 18);
  const Positions qpos{0, 1, 2, 10, 11, 12}, kpos = range(5, 10);
  const int64_t tq = 6, tk = 5;
  const BlockIds qi(p, qpos), ki(p, kpos);
  const std::vector<float> q = gather(p.q, p.B, p.T, p.H * p.hd, qpos);
  const std::vector<float> k = gather(p.k, p.B, p.T, p.KVH * p.hd, kpos);
  const std::vector<float> v = gather(p.v, p.B, p.T, p.KVH * p.hd, kpos);
  const std::vector<float> dout = gather(p.dout, p.B, p.T, p.H * p.hd, qpos);
  std::vector<float> out(q.size()), lse(size_t(p.B * p.H * tq));
  attention_block_forward(p.shape(tq, tk), mask_of(qi, ki, false), q.data(), k.data(), v.data(),
                          out.data(), lse.data());
  ref::Vec want_lse;
  const ref::Vec want = ref::masked_attention(
      ref::Vec(q.begin(), q.end()), ref::Vec(k.begin(), k.end()), ref::Vec(v.begin(), v.end()),
      {p.B, tq, tk, p.H, p.KVH, p.hd, 0}, qi.index, ki.index, {}, {}, &want_lse);
  expect_near_all(out, want, 1e-5, "out");
  expect_near_all(lse, want_lse, 1e-5, "lse");
  std::vector<float> dq(q.size(), 0.0f), dk(k.size(), 0.0f), dv(v.size(), 0.0f);
  attention_block_backward(p.shape(tq, tk), mask_of(qi, ki, false), q.data(), k.data(),
                           v.data(), out.data(), lse.data(), dout.data(), dq.data(), dk.data(),
                           dv.data());
  for (const auto* g : {&dq, &dk, &dv}) {
    for (float x : *g) ASSERT_TRUE(std::isfinite(x));
  }
  const int64_t width = p.H * p.hd;
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t c = 0; c < 3 * width; ++c) ASSERT_EQ(dq[b * tq * width + c], 0.0f);
  }
}

struct Grads {
  std::vector<float> dq, dk, dv;
};

// The ring backward: for every query rank and key block, the block backward with the query
// rank's final merged out/lse; gradients scattered to global positions.
Grads backward_blocks(const Problem& p, const std::vector<Positions>& blocks) {
  Grads g{std::vector<float>(p.q.size(), 0.0f), std::vector<float>(p.k.size(), 0.0f),
          std::vector<float>(p.v.size(), 0.0f)};
  for (const Positions& qpos : blocks) {
    const Merged fin = forward_blocks(p, qpos, blocks, false);
    const int64_t tq = static_cast<int64_t>(qpos.size());
    const BlockIds qi(p, qpos);
    const std::vector<float> q = gather(p.q, p.B, p.T, p.H * p.hd, qpos);
    const std::vector<float> dout = gather(p.dout, p.B, p.T, p.H * p.hd, qpos);
    std::vector<float> dq(q.size(), 0.0f);
    for (const Positions& kpos : blocks) {
      const int64_t tk = static_cast<int64_t>(kpos.size());
      const BlockIds ki(p, kpos);
      const std::vector<float> k = gather(p.k, p.B, p.T, p.KVH * p.hd, kpos);
      const std::vector<float> v = gather(p.v, p.B, p.T, p.KVH * p.hd, kpos);
      std::vector<float> dk(k.size(), 0.0f), dv(v.size(), 0.0f);
      attention_block_backward(p.shape(tq, tk), mask_of(qi, ki, false), q.data(), k.data(),
                               v.data(), fin.out.data(), fin.lse.data(), dout.data(), dq.data(),
                               dk.data(), dv.data());
      scatter_add(dk, p.B, p.T, p.KVH * p.hd, kpos, g.dk);
      scatter_add(dv, p.B, p.T, p.KVH * p.hd, kpos, g.dv);
    }
    scatter_add(dq, p.B, p.T, p.H * p.hd, qpos, g.dq);
  }
  return g;
}

// d(sum(dout * out))/dx by central differences of the reference, for x one of q, k, v.
ref::Vec numeric_gradient(const Problem& p, int which) {
  std::vector<float> x[3] = {p.q, p.k, p.v};
  const ref::Vec dout(p.dout.begin(), p.dout.end());
  std::vector<ref::Vec> xd;
  for (const auto& t : x) xd.emplace_back(t.begin(), t.end());
  const Positions all = range(0, p.T);
  std::vector<int64_t> index;
  for (int64_t b = 0; b < p.B; ++b) index.insert(index.end(), all.begin(), all.end());
  const auto loss = [&]() {
    const ref::Vec out = ref::masked_attention(xd[0], xd[1], xd[2],
                                               {p.B, p.T, p.T, p.H, p.KVH, p.hd, p.window},
                                               index, index, p.docs, p.docs);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += out[i] * dout[i];
    return l;
  };
  const double h = 1e-6;
  ref::Vec grad(xd[which].size());
  for (size_t i = 0; i < grad.size(); ++i) {
    const double x0 = xd[which][i];
    xd[which][i] = x0 + h;
    const double up = loss();
    xd[which][i] = x0 - h;
    const double down = loss();
    xd[which][i] = x0;
    grad[i] = (up - down) / (2 * h);
  }
  return grad;
}

TEST(AttentionBlock, BackwardSummedOverBlocksMatchesFullAndFiniteDifferences) {
  for (const MaskCase& mc : kMasks) {
    const Problem p(mc.window, mc.docs, 15);
    const Grads full = backward_blocks(p, {range(0, p.T)});
    const ref::Vec numeric[3] = {numeric_gradient(p, 0), numeric_gradient(p, 1),
                                 numeric_gradient(p, 2)};
    const std::vector<float>* full_g[3] = {&full.dq, &full.dk, &full.dv};
    for (int w = 0; w < 3; ++w) {
      expect_near_all(*full_g[w], numeric[w], 1e-5, mc.name + " one block vs numeric " +
                                                         std::to_string(w));
    }
    for (const auto& [name, blocks] : splits(p.T)) {
      const Grads got = backward_blocks(p, blocks);
      const std::vector<float>* got_g[3] = {&got.dq, &got.dk, &got.dv};
      for (int w = 0; w < 3; ++w) {
        expect_near_all(*got_g[w], ref::Vec(full_g[w]->begin(), full_g[w]->end()), 1e-5,
                        mc.name + " " + name + " vs one block " + std::to_string(w));
      }
    }
  }
}

// Multi-head attention (kv_heads == heads) through the same ring.
TEST(AttentionBlock, MultiHeadAttentionBlocksMatchTheReference) {
  Problem p(0, true, 16);
  p.KVH = p.H;
  std::mt19937_64 rng(17);
  p.k = test::random_floats(size_t(p.B * p.T * p.KVH * p.hd), rng, -2, 2);
  p.v = test::random_floats(p.k.size(), rng, -1, 1);
  const Reference want = reference(p, p.q, p.k, p.v);
  const Merged got = forward_all(p, cp_blocks(p.T, 2), cp_blocks(p.T, 2), true, false);
  expect_near_all(got.out, want.out, 1e-5, "out");
}

}  // namespace
}  // namespace ms::ops
