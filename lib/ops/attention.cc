// Tiled masked attention. A Tile holds the working set of one (query tile, key tile) pair; its
// products (scores, P V, dS K, P^T dO, dS^T Q) are sgemm calls on the tiles, so the attention
// runs at matmul speed. A MaskView answers, from per-tile index and document ranges computed
// once per call, whether a tile pair is hidden, fully visible or needs the per-element mask.
#include "ops/attention.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/gemm.h"
#include "ops/parallel.h"

namespace ms::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Addressing of the (batch, tokens, heads, head_dim) layouts of queries (Tq tokens a row) and
// keys/values (Tk).
struct Layout {
  const AttentionShape& s;
  int64_t tq, tk;
  explicit Layout(const AttentionShape& shape)
      : s(shape), tq(shape.seq), tk(shape.kv_seq > 0 ? shape.kv_seq : shape.seq) {}
  int64_t q_row(int64_t b, int64_t t, int64_t h) const {
    return ((b * tq + t) * s.heads + h) * s.head_dim;
  }
  int64_t kv_row(int64_t b, int64_t t, int64_t g) const {
    return ((b * tk + t) * s.kv_heads + g) * s.head_dim;
  }
  int64_t lse_index(int64_t b, int64_t h, int64_t t) const { return (b * s.heads + h) * tq + t; }
  int64_t q_tiles() const { return (tq + s.block - 1) / s.block; }
  int64_t k_tiles() const { return (tk + s.block - 1) / s.block; }
};

// How much of a (query tile, key tile) pair the mask lets through.
enum class Cover { kNone, kSome, kAll };

// The smallest and largest index and document id of the tokens of one tile.
struct Range {
  int64_t lo, hi, doc_lo, doc_hi;
};

class MaskView {
 public:
  MaskView(const Layout& L, const AttentionMask& m)
      : m_(m), tq_(L.tq), tk_(L.tk), window_(L.s.window), docs_(m.q_doc.present()) {
    assert(m.q_doc.present() == m.k_doc.present() && "document ids for queries and keys, or none");
    q_ranges_ = ranges(L, m.q_index, m.q_doc, L.tq, L.q_tiles());
    k_ranges_ = ranges(L, m.k_index, m.k_doc, L.tk, L.k_tiles());
    q_tiles_ = L.q_tiles();
    k_tiles_ = L.k_tiles();
  }

  int64_t q_pos(int64_t b, int64_t i) const { return m_.q_index ? m_.q_index[b * tq_ + i] : i; }
  int64_t k_pos(int64_t b, int64_t j) const { return m_.k_index ? m_.k_index[b * tk_ + j] : j; }
  int64_t q_doc(int64_t b, int64_t i) const { return docs_ ? m_.q_doc[b * tq_ + i] : 0; }
  int64_t k_doc(int64_t b, int64_t j) const { return docs_ ? m_.k_doc[b * tk_ + j] : 0; }
  bool has_docs() const { return docs_; }
  int64_t window() const { return window_; }

  Cover cover(int64_t b, int64_t q_tile, int64_t k_tile) const {
    const Range& q = q_ranges_[b * q_tiles_ + q_tile];
    const Range& k = k_ranges_[b * k_tiles_ + k_tile];
    const bool docs_apart = docs_ && (k.doc_hi < q.doc_lo || k.doc_lo > q.doc_hi);
    if (k.lo > q.hi || (window_ > 0 && k.hi <= q.lo - window_) || docs_apart) return Cover::kNone;
    const bool one_doc = !docs_ || (q.doc_lo == q.doc_hi && k.doc_lo == k.doc_hi &&
                                    q.doc_lo == k.doc_lo);
    if (k.hi <= q.lo && (window_ == 0 || k.lo > q.hi - window_) && one_doc) return Cover::kAll;
    return Cover::kSome;
  }

 private:
  std::vector<Range> ranges(const Layout& L, const int64_t* index, const TokenIds& doc,
                            int64_t t, int64_t tiles) const {
    std::vector<Range> out(static_cast<size_t>(L.s.batch * tiles));
    for (int64_t b = 0; b < L.s.batch; ++b) {
      for (int64_t tile = 0; tile < tiles; ++tile) {
        const int64_t t0 = tile * L.s.block, t1 = std::min(t, t0 + L.s.block);
        Range r{t0, t1 - 1, 0, 0};
        if (index != nullptr) {
          const auto [lo, hi] = std::minmax_element(index + b * t + t0, index + b * t + t1);
          r.lo = *lo;
          r.hi = *hi;
        }
        if (doc.present()) {
          r.doc_lo = r.doc_hi = doc[b * t + t0];
          for (int64_t n = b * t + t0 + 1; n < b * t + t1; ++n) {
            r.doc_lo = std::min(r.doc_lo, doc[n]);
            r.doc_hi = std::max(r.doc_hi, doc[n]);
          }
        }
        out[static_cast<size_t>(b * tiles + tile)] = r;
      }
    }
    return out;
  }

  const AttentionMask& m_;
  int64_t tq_, tk_, window_;
  bool docs_;
  int64_t q_tiles_ = 0, k_tiles_ = 0;
  std::vector<Range> q_ranges_, k_ranges_;
};

// Per-thread scratch for one tile pair. Tile products are small sgemm calls (single-threaded
// inside OpenBLAS at this size), reading keys and values in place with their row stride.
struct Tile {
  int64_t nq = 0, nk = 0, hd = 0, bk = 0;
  std::vector<float> qs;     // (nq, hd) queries times 1/sqrt(hd)
  std::vector<float> score;  // (nq, bk) scores, then probabilities
  std::vector<float> dp;     // (nq, bk) dout . v, then dS (backward)

  Tile(int64_t block, int64_t head_dim)
      : hd(head_dim), bk(block), qs(block * head_dim), score(block * block), dp(block * block) {}

  void load_queries(const float* q, const Layout& L, int64_t b, int64_t h, int64_t i0,
                    int64_t i1, float scale) {
    nq = i1 - i0;
    for (int64_t i = 0; i < nq; ++i) {
      const float* src = q + L.q_row(b, i0 + i, h);
      for (int64_t d = 0; d < hd; ++d) qs[i * hd + d] = src[d] * scale;
    }
  }
  // score = qs k^T over keys [j0, j0 + nk) (rows `krows`, stride kv_heads * hd), -inf where
  // the mask hides (i0 + i, j0 + j); the per-element mask only runs on partly visible pairs.
  void scores(const Layout& L, const MaskView& m, Cover cover, const float* krows, int64_t b,
              int64_t i0, int64_t j0) {
    sgemm(Transpose::kNo, Transpose::kYes, nq, nk, hd, 1.0f, qs.data(), hd, krows,
          L.s.kv_heads * hd, 0.0f, score.data(), bk);
    if (cover == Cover::kSome) apply_mask(m, b, i0, j0);
  }
  void apply_mask(const MaskView& m, int64_t b, int64_t i0, int64_t j0) {
    const int64_t w = m.window();
    for (int64_t i = 0; i < nq; ++i) {
      const int64_t qi = m.q_pos(b, i0 + i), qd = m.q_doc(b, i0 + i);
      float* row = score.data() + i * bk;
      for (int64_t j = 0; j < nk; ++j) {
        const int64_t kj = m.k_pos(b, j0 + j);
        const bool seen = kj <= qi && (w == 0 || kj > qi - w) &&
                          (!m.has_docs() || m.k_doc(b, j0 + j) == qd);
        if (!seen) row[j] = kNegInf;
      }
    }
  }
  // score[i][j] <- exp(score[i][j] - lse[i]) (0 where masked, and on rows that see nothing).
  void probabilities(const float* lse_rows) {
    for (int64_t i = 0; i < nq; ++i) {
      float* row = score.data() + i * bk;
      if (lse_rows[i] == kNegInf) {
        std::fill(row, row + nk, 0.0f);
        continue;
      }
      for (int64_t j = 0; j < nk; ++j) row[j] = std::exp(row[j] - lse_rows[i]);
    }
  }
  // dp = dout v^T, then dS = P * (dp - delta) in place (douts: rows with stride heads * hd).
  void score_gradient(const Layout& L, const float* douts, const float* vrows,
                      const float* delta_rows) {
    sgemm(Transpose::kNo, Transpose::kYes, nq, nk, hd, 1.0f, douts, L.s.heads * hd, vrows,
          L.s.kv_heads * hd, 0.0f, dp.data(), bk);
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < nk; ++j) {
        dp[i * bk + j] = score[i * bk + j] * (dp[i * bk + j] - delta_rows[i]);
      }
    }
  }
};

// Turns one row of scores into probabilities relative to the running maximum m and rescales
// the row's accumulators and running sum l (one online-softmax step).
void online_softmax_row(float* row, int64_t nk, float& m, float& l, float* acc, int64_t hd) {
  const float row_max = *std::max_element(row, row + nk);
  const float m_new = std::max(m, row_max);
  if (m_new == kNegInf) {
    std::fill(row, row + nk, 0.0f);
    return;
  }
  const float correction = std::exp(m - m_new);
  for (int64_t d = 0; d < hd; ++d) acc[d] *= correction;
  float row_sum = 0;
  for (int64_t j = 0; j < nk; ++j) row_sum += (row[j] = std::exp(row[j] - m_new));
  l = l * correction + row_sum;
  m = m_new;
}

// Online-softmax forward of one (batch, head, query tile) over the key tiles it sees.
void forward_tile(const Layout& L, const MaskView& mask, const float* q, const float* k,
                  const float* v, float* out, float* lse, int64_t b, int64_t h, int64_t qt,
                  Tile& tile) {
  const AttentionShape& s = L.s;
  const int64_t hd = s.head_dim, g = h / (s.heads / s.kv_heads);
  const int64_t i0 = qt * s.block, i1 = std::min(L.tq, i0 + s.block);
  tile.load_queries(q, L, b, h, i0, i1, static_cast<float>(1.0 / std::sqrt(double(hd))));
  std::vector<float> m(tile.nq, kNegInf), l(tile.nq, 0.0f), acc(tile.nq * hd, 0.0f);
  for (int64_t kt = 0; kt < L.k_tiles(); ++kt) {
    const Cover cover = mask.cover(b, qt, kt);
    if (cover == Cover::kNone) continue;
    const int64_t j0 = kt * s.block;
    tile.nk = std::min(L.tk, j0 + s.block) - j0;
    tile.scores(L, mask, cover, k + L.kv_row(b, j0, g), b, i0, j0);
    for (int64_t i = 0; i < tile.nq; ++i) {
      online_softmax_row(tile.score.data() + i * tile.bk, tile.nk, m[i], l[i],
                         acc.data() + i * hd, hd);
    }
    sgemm(Transpose::kNo, Transpose::kNo, tile.nq, hd, tile.nk, 1.0f, tile.score.data(),
          tile.bk, v + L.kv_row(b, j0, g), s.kv_heads * hd, 1.0f, acc.data(), hd);
  }
  for (int64_t i = 0; i < tile.nq; ++i) {
    float* o = out + L.q_row(b, i0 + i, h);
    const bool seen = l[i] > 0;
    for (int64_t d = 0; d < hd; ++d) o[d] = seen ? acc[i * hd + d] / l[i] : 0.0f;
    lse[L.lse_index(b, h, i0 + i)] = seen ? m[i] + std::log(l[i]) : kNegInf;
  }
}

// delta[b,h,i] = dout_i . out_i, the row term of the softmax backward.
std::vector<float> row_deltas(const Layout& L, const float* out, const float* dout) {
  const AttentionShape& s = L.s;
  std::vector<float> delta(s.batch * s.heads * L.tq);
  parallel_for(s.batch * L.tq, [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t b = bt / L.tq, t = bt % L.tq;
      for (int64_t h = 0; h < s.heads; ++h) {
        const float* o = out + L.q_row(b, t, h);
        const float* g = dout + L.q_row(b, t, h);
        float dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += o[d] * g[d];
        delta[L.lse_index(b, h, t)] = dot;
      }
    }
  }, 8);
  return delta;
}

// Gathers lse (and delta) of query rows [i0, i0 + n) of head h.
void gather_rows(const Layout& L, const float* src, int64_t b, int64_t h, int64_t i0, int64_t n,
                 float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[L.lse_index(b, h, i0 + i)];
}

struct BackwardArgs {
  const Layout& L;
  const MaskView& mask;
  const float *q, *k, *v, *lse, *delta, *dout;
  float scale;
};

// dK, dV of one (batch, kv head, key tile), over every query head of the group and every query
// tile that sees the keys.
void key_tile_backward(const BackwardArgs& a, int64_t b, int64_t g, int64_t kt, float* dk,
                       float* dv, Tile& tile) {
  const Layout& L = a.L;
  const AttentionShape& s = L.s;
  const int64_t hd = s.head_dim, rep = s.heads / s.kv_heads, j0 = kt * s.block;
  tile.nk = std::min(L.tk, j0 + s.block) - j0;
  const float* krows = a.k + L.kv_row(b, j0, g);
  const float* vrows = a.v + L.kv_row(b, j0, g);
  std::vector<float> dk_acc(tile.nk * hd, 0.0f), dv_acc(tile.nk * hd, 0.0f);
  std::vector<float> lse_rows(s.block), delta_rows(s.block);
  for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
    for (int64_t qt = 0; qt < L.q_tiles(); ++qt) {
      const Cover cover = a.mask.cover(b, qt, kt);
      if (cover == Cover::kNone) continue;
      const int64_t i0 = qt * s.block, i1 = std::min(L.tq, i0 + s.block);
      tile.load_queries(a.q, L, b, h, i0, i1, a.scale);
      gather_rows(L, a.lse, b, h, i0, tile.nq, lse_rows.data());
      gather_rows(L, a.delta, b, h, i0, tile.nq, delta_rows.data());
      tile.scores(L, a.mask, cover, krows, b, i0, j0);
      tile.probabilities(lse_rows.data());
      const float* douts = a.dout + L.q_row(b, i0, h);
      tile.score_gradient(L, douts, vrows, delta_rows.data());
      sgemm(Transpose::kYes, Transpose::kNo, tile.nk, hd, tile.nq, 1.0f, tile.score.data(),
            tile.bk, douts, s.heads * hd, 1.0f, dv_acc.data(), hd);
      sgemm(Transpose::kYes, Transpose::kNo, tile.nk, hd, tile.nq, 1.0f, tile.dp.data(), tile.bk,
            tile.qs.data(), hd, 1.0f, dk_acc.data(), hd);
    }
  }
  for (int64_t j = 0; j < tile.nk; ++j) {
    const int64_t row = L.kv_row(b, j0 + j, g);
    for (int64_t d = 0; d < hd; ++d) {
      dk[row + d] += dk_acc[j * hd + d];
      dv[row + d] += dv_acc[j * hd + d];
    }
  }
}

// dQ of one (batch, head, query tile), over the key tiles it sees.
void query_tile_backward(const BackwardArgs& a, int64_t b, int64_t h, int64_t qt, float* dq,
                         Tile& tile) {
  const Layout& L = a.L;
  const AttentionShape& s = L.s;
  const int64_t hd = s.head_dim, g = h / (s.heads / s.kv_heads);
  const int64_t i0 = qt * s.block, i1 = std::min(L.tq, i0 + s.block);
  tile.load_queries(a.q, L, b, h, i0, i1, a.scale);
  std::vector<float> lse_rows(s.block), delta_rows(s.block);
  std::vector<float> dq_acc(tile.nq * hd, 0.0f);
  gather_rows(L, a.lse, b, h, i0, tile.nq, lse_rows.data());
  gather_rows(L, a.delta, b, h, i0, tile.nq, delta_rows.data());
  for (int64_t kt = 0; kt < L.k_tiles(); ++kt) {
    const Cover cover = a.mask.cover(b, qt, kt);
    if (cover == Cover::kNone) continue;
    const int64_t j0 = kt * s.block;
    tile.nk = std::min(L.tk, j0 + s.block) - j0;
    const float* krows = a.k + L.kv_row(b, j0, g);
    tile.scores(L, a.mask, cover, krows, b, i0, j0);
    tile.probabilities(lse_rows.data());
    tile.score_gradient(L, a.dout + L.q_row(b, i0, h), a.v + L.kv_row(b, j0, g),
                        delta_rows.data());
    sgemm(Transpose::kNo, Transpose::kNo, tile.nq, hd, tile.nk, 1.0f, tile.dp.data(), tile.bk,
          krows, s.kv_heads * hd, 1.0f, dq_acc.data(), hd);
  }
  for (int64_t i = 0; i < tile.nq; ++i) {
    float* dst = dq + L.q_row(b, i0 + i, h);
    for (int64_t d = 0; d < hd; ++d) dst[d] += a.scale * dq_acc[i * hd + d];
  }
}

}  // namespace

void attention_block_forward(const AttentionShape& s, const AttentionMask& mask, const float* q,
                             const float* k, const float* v, float* out, float* lse) {
  const Layout L(s);
  const MaskView view(L, mask);
  const int64_t tiles = L.q_tiles();
  parallel_for(s.batch * s.heads * tiles, [&](int64_t lo, int64_t hi) {
    Tile tile(s.block, s.head_dim);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.heads * tiles), h = task / tiles % s.heads;
      forward_tile(L, view, q, k, v, out, lse, b, h, task % tiles, tile);
    }
  });
}

void attention_merge(const AttentionShape& s, const float* out_b, const float* lse_b, float* out,
                     float* lse) {
  const int64_t t = s.seq, hd = s.head_dim;
  parallel_for(s.batch * t, [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t b = bt / t, i = bt % t;
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t li = (b * s.heads + h) * t + i, row = (bt * s.heads + h) * hd;
        const float la = lse[li], lb = lse_b[li];
        if (lb == kNegInf) continue;
        if (la == kNegInf) {
          std::copy(out_b + row, out_b + row + hd, out + row);
          lse[li] = lb;
          continue;
        }
        const float merged = std::max(la, lb) + std::log1p(std::exp(-std::abs(la - lb)));
        const float wa = std::exp(la - merged), wb = std::exp(lb - merged);
        for (int64_t d = 0; d < hd; ++d) out[row + d] = out[row + d] * wa + out_b[row + d] * wb;
        lse[li] = merged;
      }
    }
  }, 8);
}

void attention_block_backward(const AttentionShape& s, const AttentionMask& mask, const float* q,
                              const float* k, const float* v, const float* out, const float* lse,
                              const float* dout, float* dq, float* dk, float* dv) {
  const Layout L(s);
  const MaskView view(L, mask);
  const std::vector<float> delta = row_deltas(L, out, dout);
  const BackwardArgs args{L, view, q, k, v, lse, delta.data(), dout,
                          static_cast<float>(1.0 / std::sqrt(double(s.head_dim)))};
  const int64_t k_tiles = L.k_tiles(), q_tiles = L.q_tiles();
  parallel_for(s.batch * s.kv_heads * k_tiles, [&](int64_t lo, int64_t hi) {
    Tile tile(s.block, s.head_dim);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.kv_heads * k_tiles), g = task / k_tiles % s.kv_heads;
      key_tile_backward(args, b, g, task % k_tiles, dk, dv, tile);
    }
  });
  parallel_for(s.batch * s.heads * q_tiles, [&](int64_t lo, int64_t hi) {
    Tile tile(s.block, s.head_dim);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.heads * q_tiles), h = task / q_tiles % s.heads;
      query_tile_backward(args, b, h, task % q_tiles, dq, tile);
    }
  });
}

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       float* out, float* lse) {
  attention_block_forward(s, AttentionMask{}, q, k, v, out, lse);
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq,
                        float* dk, float* dv) {
  attention_block_backward(s, AttentionMask{}, q, k, v, out, lse, dout, dq, dk, dv);
}

}  // namespace ms::ops
