// Tiled causal attention. A Tile holds the working set of one (query tile, key tile) pair; its
// products (scores, P V, dS K, P^T dO, dS^T Q) are sgemm calls on the tiles, so the attention
// runs at matmul speed.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/gemm.h"
#include "ops/parallel.h"

namespace ms::ops {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Addressing of the (batch, seq, heads, head_dim) layouts and the causal/window mask.
struct Layout {
  const AttentionShape& s;
  int64_t q_row(int64_t b, int64_t t, int64_t h) const {
    return ((b * s.seq + t) * s.heads + h) * s.head_dim;
  }
  int64_t kv_row(int64_t b, int64_t t, int64_t g) const {
    return ((b * s.seq + t) * s.kv_heads + g) * s.head_dim;
  }
  int64_t lse_index(int64_t b, int64_t h, int64_t t) const { return (b * s.heads + h) * s.seq + t; }
  bool visible(int64_t i, int64_t j) const { return j <= i && (s.window == 0 || j > i - s.window); }
  // First key tile start any query in [i0, i1) can see.
  int64_t first_key(int64_t i0) const {
    const int64_t j = s.window == 0 ? 0 : std::max<int64_t>(0, i0 - s.window + 1);
    return j / s.block * s.block;
  }
  // One past the last query that can see a key in [j0, j1).
  int64_t last_query(int64_t j1) const {
    return s.window == 0 ? s.seq : std::min(s.seq, j1 - 1 + s.window);
  }
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
  // the mask hides (i0 + i, j0 + j).
  void scores(const Layout& L, const float* krows, int64_t i0, int64_t j0) {
    sgemm(Transpose::kNo, Transpose::kYes, nq, nk, hd, 1.0f, qs.data(), hd, krows,
          L.s.kv_heads * hd, 0.0f, score.data(), bk);
    for (int64_t i = 0; i < nq; ++i) {
      for (int64_t j = 0; j < nk; ++j) {
        if (!L.visible(i0 + i, j0 + j)) score[i * bk + j] = kNegInf;
      }
    }
  }
  // score[i][j] <- exp(score[i][j] - lse[i]) (0 where masked).
  void probabilities(const float* lse_rows) {
    for (int64_t i = 0; i < nq; ++i) {
      float* row = score.data() + i * bk;
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

// Online-softmax forward of one (batch, head, query tile).
void forward_tile(const AttentionShape& s, const Layout& L, const float* q, const float* k,
                  const float* v, float* out, float* lse, int64_t b, int64_t h, int64_t i0,
                  Tile& tile) {
  const int64_t hd = s.head_dim, g = h / (s.heads / s.kv_heads);
  const int64_t i1 = std::min(s.seq, i0 + s.block);
  tile.load_queries(q, L, b, h, i0, i1, static_cast<float>(1.0 / std::sqrt(double(hd))));
  std::vector<float> m(tile.nq, kNegInf), l(tile.nq, 0.0f), acc(tile.nq * hd, 0.0f);
  for (int64_t j0 = L.first_key(i0); j0 < i1; j0 += s.block) {
    tile.nk = std::min(s.seq, j0 + s.block) - j0;
    tile.scores(L, k + L.kv_row(b, j0, g), i0, j0);
    for (int64_t i = 0; i < tile.nq; ++i) {
      online_softmax_row(tile.score.data() + i * tile.bk, tile.nk, m[i], l[i],
                         acc.data() + i * hd, hd);
    }
    sgemm(Transpose::kNo, Transpose::kNo, tile.nq, hd, tile.nk, 1.0f, tile.score.data(),
          tile.bk, v + L.kv_row(b, j0, g), s.kv_heads * hd, 1.0f, acc.data(), hd);
  }
  for (int64_t i = 0; i < tile.nq; ++i) {
    float* o = out + L.q_row(b, i0 + i, h);
    for (int64_t d = 0; d < hd; ++d) o[d] = acc[i * hd + d] / l[i];
    lse[L.lse_index(b, h, i0 + i)] = m[i] + std::log(l[i]);
  }
}

int64_t num_tiles(const AttentionShape& s) { return (s.seq + s.block - 1) / s.block; }

// delta[b,h,i] = dout_i . out_i, the row term of the softmax backward.
std::vector<float> row_deltas(const AttentionShape& s, const Layout& L, const float* out,
                              const float* dout) {
  std::vector<float> delta(s.batch * s.heads * s.seq);
  parallel_for(s.batch * s.seq, [&](int64_t lo, int64_t hi) {
    for (int64_t bt = lo; bt < hi; ++bt) {
      const int64_t b = bt / s.seq, t = bt % s.seq;
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
  const AttentionShape& s;
  const Layout& L;
  const float *q, *k, *v, *lse, *delta, *dout;
  float scale;
};

// dK, dV of one (batch, kv head, key tile), over every query head of the group and every query
// tile that sees the keys.
void key_tile_backward(const BackwardArgs& a, int64_t b, int64_t g, int64_t j0, float* dk,
                       float* dv, Tile& tile) {
  const AttentionShape& s = a.s;
  const int64_t hd = s.head_dim, rep = s.heads / s.kv_heads;
  tile.nk = std::min(s.seq, j0 + s.block) - j0;
  const float* krows = a.k + a.L.kv_row(b, j0, g);
  const float* vrows = a.v + a.L.kv_row(b, j0, g);
  std::vector<float> dk_acc(tile.nk * hd, 0.0f), dv_acc(tile.nk * hd, 0.0f);
  std::vector<float> lse_rows(s.block), delta_rows(s.block);
  const int64_t i_end = a.L.last_query(j0 + tile.nk);
  for (int64_t h = g * rep; h < (g + 1) * rep; ++h) {
    for (int64_t i0 = j0; i0 < i_end; i0 += s.block) {
      const int64_t i1 = std::min(s.seq, i0 + s.block);
      tile.load_queries(a.q, a.L, b, h, i0, i1, a.scale);
      gather_rows(a.L, a.lse, b, h, i0, tile.nq, lse_rows.data());
      gather_rows(a.L, a.delta, b, h, i0, tile.nq, delta_rows.data());
      tile.scores(a.L, krows, i0, j0);
      tile.probabilities(lse_rows.data());
      const float* douts = a.dout + a.L.q_row(b, i0, h);
      tile.score_gradient(a.L, douts, vrows, delta_rows.data());
      sgemm(Transpose::kYes, Transpose::kNo, tile.nk, hd, tile.nq, 1.0f, tile.score.data(),
            tile.bk, douts, s.heads * hd, 1.0f, dv_acc.data(), hd);
      sgemm(Transpose::kYes, Transpose::kNo, tile.nk, hd, tile.nq, 1.0f, tile.dp.data(), tile.bk,
            tile.qs.data(), hd, 1.0f, dk_acc.data(), hd);
    }
  }
  for (int64_t j = 0; j < tile.nk; ++j) {
    const int64_t row = a.L.kv_row(b, j0 + j, g);
    for (int64_t d = 0; d < hd; ++d) {
      dk[row + d] += dk_acc[j * hd + d];
      dv[row + d] += dv_acc[j * hd + d];
    }
  }
}

// dQ of one (batch, head, query tile), over the key tiles it sees.
void query_tile_backward(const BackwardArgs& a, int64_t b, int64_t h, int64_t i0, float* dq,
                         Tile& tile) {
  const AttentionShape& s = a.s;
  const int64_t hd = s.head_dim, g = h / (s.heads / s.kv_heads);
  const int64_t i1 = std::min(s.seq, i0 + s.block);
  tile.load_queries(a.q, a.L, b, h, i0, i1, a.scale);
  std::vector<float> lse_rows(s.block), delta_rows(s.block);
  std::vector<float> dq_acc(tile.nq * hd, 0.0f);
  gather_rows(a.L, a.lse, b, h, i0, tile.nq, lse_rows.data());
  gather_rows(a.L, a.delta, b, h, i0, tile.nq, delta_rows.data());
  for (int64_t j0 = a.L.first_key(i0); j0 < i1; j0 += s.block) {
    tile.nk = std::min(s.seq, j0 + s.block) - j0;
    const float* krows = a.k + a.L.kv_row(b, j0, g);
    tile.scores(a.L, krows, i0, j0);
    tile.probabilities(lse_rows.data());
    tile.score_gradient(a.L, a.dout + a.L.q_row(b, i0, h), a.v + a.L.kv_row(b, j0, g),
                        delta_rows.data());
    sgemm(Transpose::kNo, Transpose::kNo, tile.nq, hd, tile.nk, 1.0f, tile.dp.data(), tile.bk,
          krows, s.kv_heads * hd, 1.0f, dq_acc.data(), hd);
  }
  for (int64_t i = 0; i < tile.nq; ++i) {
    float* dst = dq + a.L.q_row(b, i0 + i, h);
    for (int64_t d = 0; d < hd; ++d) dst[d] += a.scale * dq_acc[i * hd + d];
  }
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* q, const float* k, const float* v,
                       float* out, float* lse) {
  const Layout L{s};
  const int64_t tiles = num_tiles(s);
  parallel_for(s.batch * s.heads * tiles, [&](int64_t lo, int64_t hi) {
    Tile tile(s.block, s.head_dim);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.heads * tiles), h = task / tiles % s.heads;
      forward_tile(s, L, q, k, v, out, lse, b, h, task % tiles * s.block, tile);
    }
  });
}

void attention_backward(const AttentionShape& s, const float* q, const float* k, const float* v,
                        const float* out, const float* lse, const float* dout, float* dq,
                        float* dk, float* dv) {
  const Layout L{s};
  const std::vector<float> delta = row_deltas(s, L, out, dout);
  const BackwardArgs args{s, L, q, k, v, lse, delta.data(), dout,
                          static_cast<float>(1.0 / std::sqrt(double(s.head_dim)))};
  const int64_t tiles = num_tiles(s);
  parallel_for(s.batch * s.kv_heads * tiles, [&](int64_t lo, int64_t hi) {
    Tile tile(s.block, s.head_dim);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.kv_heads * tiles), g = task / tiles % s.kv_heads;
      key_tile_backward(args, b, g, task % tiles * s.block, dk, dv, tile);
    }
  });
  parallel_for(s.batch * s.heads * tiles, [&](int64_t lo, int64_t hi) {
    Tile tile(s.block, s.head_dim);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t b = task / (s.heads * tiles), h = task / tiles % s.heads;
      query_tile_backward(args, b, h, task % tiles * s.block, dq, tile);
    }
  });
}

}  // namespace ms::ops
