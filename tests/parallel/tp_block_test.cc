// The tensor-parallel SwiGLU MLP and grouped-query attention at every tp the world allows, with
// and without sequence parallelism, against the single-process block built from ops/ the way
// lib/model/compute.cc builds it: outputs, input gradients and every weight gradient, gathered
// back to global shape, within 1e-5 relative; the same run twice is bitwise identical; layouts
// tp does not divide are refused on every rank before communicating.
#include <gtest/gtest.h>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/linear.h"
#include "ops/rope.h"
#include "parallel/tp_block.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

using testing::bitwise_equal;
using testing::cols_of;
using testing::expect_close;
using testing::gather;
using testing::gather_cols;
using testing::random_values;
using testing::rows_of;

std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.0f); }

TpSlice slice(int64_t global, const comm::Communicator& tp) {
  return *tp_slice(global, tp.size(), tp.rank(), "test");
}

// How a run's backward is called: with or without an input gradient (a first layer passes
// null), onto weight gradients that start at grad_init (backward accumulates).
struct Backward {
  bool input_grad = true;
  float grad_init = 0.0f;
};

std::vector<float> filled(size_t n, float v) { return std::vector<float>(n, v); }

// A gathered gradient is expected to be the reference plus what it started at.
std::vector<float> plus(std::vector<float> v, float c) {
  for (float& e : v) e += c;
  return v;
}

// ---- MLP ----

// The global MLP and its single-process answer: x (n, D), gate/up (F, D), down (D, F).
struct MlpProblem {
  std::vector<float> x, gate, up, down, dy;
  std::vector<float> y, dx, dgate, dup, ddown;

  MlpProblem(const TpMlpShape& s, uint64_t seed) {
    const int64_t n = s.rows, D = s.d_model, F = s.d_ff;
    x = random_values(n * D, seed, "x");
    gate = random_values(F * D, seed, "gate", -0.5f, 0.5f);
    up = random_values(F * D, seed, "up", -0.5f, 0.5f);
    down = random_values(D * F, seed, "down", -0.5f, 0.5f);
    dy = random_values(n * D, seed, "dy");
    std::vector<float> g(n * F), u(n * F), act(n * F);
    ops::linear_forward(x.data(), gate.data(), g.data(), n, D, F);
    ops::linear_forward(x.data(), up.data(), u.data(), n, D, F);
    ops::swiglu_forward(g.data(), u.data(), act.data(), n * F);
    y.resize(n * D);
    ops::linear_forward(act.data(), down.data(), y.data(), n, F, D);
    std::vector<float> dact = zeros(n * F), dg = zeros(n * F), du = zeros(n * F);
    dx = zeros(n * D), dgate = zeros(F * D), dup = zeros(F * D), ddown = zeros(D * F);
    ops::linear_backward(act.data(), down.data(), dy.data(), dact.data(), ddown.data(), n, F, D);
    ops::swiglu_backward(g.data(), u.data(), dact.data(), dg.data(), du.data(), n * F);
    ops::linear_backward(x.data(), gate.data(), dg.data(), dx.data(), dgate.data(), n, D, F);
    ops::linear_backward(x.data(), up.data(), du.data(), dx.data(), dup.data(), n, D, F);
  }
};

// One rank's results, still local.
struct MlpLocal {
  std::vector<float> y, dx, dgate, dup, ddown;
};

MlpLocal run_mlp(comm::Communicator& tp, const TpMlpShape& s, const MlpProblem& p,
                 Backward b = {}) {
  const int64_t D = s.d_model;
  const TpSlice f = slice(s.d_ff, tp), seq = slice(s.rows, tp);
  const bool sp = s.sequence_parallel;
  const std::vector<float> x = sp ? rows_of(p.x, D, seq) : p.x;
  const std::vector<float> dy = sp ? rows_of(p.dy, D, seq) : p.dy;
  const std::vector<float> gate = rows_of(p.gate, D, f), up = rows_of(p.up, D, f);
  const std::vector<float> down = cols_of(p.down, D, s.d_ff, f);
  MlpLocal l{zeros(x.size()), zeros(x.size()), filled(gate.size(), b.grad_init),
             filled(up.size(), b.grad_init), filled(down.size(), b.grad_init)};
  const TpMlpWeights w{gate.data(), up.data(), down.data()};
  TpMlpActs acts;
  EXPECT_TRUE(tp_mlp_forward(tp, s, w, x.data(), acts, l.y.data()).ok());
  EXPECT_TRUE(tp_mlp_backward(tp, s, w, x.data(), acts, dy.data(),
                              b.input_grad ? l.dx.data() : nullptr,
                              {l.dgate.data(), l.dup.data(), l.ddown.data()})
                  .ok());
  return l;
}

// Odd widths; at tp 4 the second shape leaves one d_ff column per rank.
constexpr TpMlpShape kMlpShapes[] = {{8, 7, 20, false}, {12, 5, 4, false}};

class TpBlock : public testing::TpTest {};

TEST_F(TpBlock, MlpEqualsTheSingleProcessMlp) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (TpMlpShape s : kMlpShapes) {
      for (bool sp : {false, true}) {
        s.sequence_parallel = sp;
        const std::string what = "mlp tp " + std::to_string(tp_size) + (sp ? " sp " : " ") +
                                 std::to_string(s.rows) + "x" + std::to_string(s.d_model) +
                                 " d_ff " + std::to_string(s.d_ff);
        const MlpProblem p(s, 31);
        const MlpLocal l = run_mlp(*tp, s, p);
        expect_close(sp ? gather(*tp, l.y) : l.y, p.y, what + " y");
        expect_close(sp ? gather(*tp, l.dx) : l.dx, p.dx, what + " dx");
        expect_close(gather(*tp, l.dgate), p.dgate, what + " dgate");
        expect_close(gather(*tp, l.dup), p.dup, what + " dup");
        expect_close(gather_cols(*tp, l.ddown, s.d_model, s.d_ff), p.ddown, what + " ddown");
      }
    }
  }
}

// ---- attention ----

// The global attention and its single-process answer: x (n, D), q (H hd, D), k, v (KV hd, D),
// o (D, H hd).
struct AttentionProblem {
  ops::RopeTable rope;
  std::vector<float> x, q, k, v, o, dy;
  std::vector<float> y, dx, dq, dk, dv, do_;

  AttentionProblem(const TpAttentionShape& s, uint64_t seed)
      : rope(ops::make_rope_table(s.seq, s.head_dim, 10000.0)) {
    const int64_t n = s.batch * s.seq, D = s.d_model;
    const int64_t qd = s.n_heads * s.head_dim, kvd = s.n_kv_heads * s.head_dim;
    x = random_values(n * D, seed, "x");
    q = random_values(qd * D, seed, "q", -0.5f, 0.5f);
    k = random_values(kvd * D, seed, "k", -0.5f, 0.5f);
    v = random_values(kvd * D, seed, "v", -0.5f, 0.5f);
    o = random_values(D * qd, seed, "o", -0.5f, 0.5f);
    dy = random_values(n * D, seed, "dy");
    reference(s);
  }

  // As lib/model/compute.cc's attention_forward and attention_backward.
  void reference(const TpAttentionShape& s) {
    const int64_t n = s.batch * s.seq, D = s.d_model;
    const int64_t qd = s.n_heads * s.head_dim, kvd = s.n_kv_heads * s.head_dim;
    const ops::AttentionShape a{s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, s.window};
    std::vector<float> qp(n * qd), kp(n * kvd), vp(n * kvd), attn(n * qd);
    std::vector<float> lse(s.batch * s.n_heads * s.seq);
    ops::linear_forward(x.data(), q.data(), qp.data(), n, D, qd);
    ops::linear_forward(x.data(), k.data(), kp.data(), n, D, kvd);
    ops::linear_forward(x.data(), v.data(), vp.data(), n, D, kvd);
    ops::rope_forward(qp.data(), rope, s.batch, s.seq, s.n_heads);
    ops::rope_forward(kp.data(), rope, s.batch, s.seq, s.n_kv_heads);
    ops::attention_forward(a, qp.data(), kp.data(), vp.data(), attn.data(), lse.data());
    y.resize(n * D);
    ops::linear_forward(attn.data(), o.data(), y.data(), n, qd, D);
    std::vector<float> dattn = zeros(n * qd), dqp = zeros(n * qd);
    std::vector<float> dkp = zeros(n * kvd), dvp = zeros(n * kvd);
    dx = zeros(n * D), dq = zeros(qd * D), dk = zeros(kvd * D), dv = zeros(kvd * D);
    do_ = zeros(D * qd);
    ops::linear_backward(attn.data(), o.data(), dy.data(), dattn.data(), do_.data(), n, qd, D);
    ops::attention_backward(a, qp.data(), kp.data(), vp.data(), attn.data(), lse.data(),
                            dattn.data(), dqp.data(), dkp.data(), dvp.data());
    ops::rope_backward(dqp.data(), rope, s.batch, s.seq, s.n_heads);
    ops::rope_backward(dkp.data(), rope, s.batch, s.seq, s.n_kv_heads);
    ops::linear_backward(x.data(), q.data(), dqp.data(), dx.data(), dq.data(), n, D, qd);
    ops::linear_backward(x.data(), k.data(), dkp.data(), dx.data(), dk.data(), n, D, kvd);
    ops::linear_backward(x.data(), v.data(), dvp.data(), dx.data(), dv.data(), n, D, kvd);
  }
};

struct AttentionLocal {
  std::vector<float> y, dx, dq, dk, dv, do_;
};

AttentionLocal run_attention(comm::Communicator& tp, const TpAttentionShape& s,
                             const AttentionProblem& p, Backward b = {}) {
  const int64_t D = s.d_model, qd = s.n_heads * s.head_dim, kvd = s.n_kv_heads * s.head_dim;
  const bool sp = s.sequence_parallel;
  const TpSlice heads = slice(qd, tp), kv_heads = slice(kvd, tp), seq = slice(s.batch * s.seq, tp);
  const std::vector<float> x = sp ? rows_of(p.x, D, seq) : p.x;
  const std::vector<float> dy = sp ? rows_of(p.dy, D, seq) : p.dy;
  const std::vector<float> q = rows_of(p.q, D, heads), o = cols_of(p.o, D, qd, heads);
  const std::vector<float> k = rows_of(p.k, D, kv_heads), v = rows_of(p.v, D, kv_heads);
  AttentionLocal l{zeros(x.size()),          zeros(x.size()),
                   filled(q.size(), b.grad_init), filled(k.size(), b.grad_init),
                   filled(v.size(), b.grad_init), filled(o.size(), b.grad_init)};
  const TpAttentionWeights w{q.data(), k.data(), v.data(), o.data()};
  TpAttentionActs acts;
  EXPECT_TRUE(tp_attention_forward(tp, s, p.rope, w, x.data(), acts, l.y.data()).ok());
  EXPECT_TRUE(tp_attention_backward(tp, s, p.rope, w, x.data(), acts, dy.data(),
                                    b.input_grad ? l.dx.data() : nullptr,
                                    {l.dq.data(), l.dk.data(), l.dv.data(), l.do_.data()})
                  .ok());
  return l;
}

// Grouped-query (8 heads over 4 kv heads: one kv head and its 2 query heads per rank at tp 4),
// multi-head with an odd d_model and 3 sequences of 4 (at tp 4 a sequence shard of 3 rows
// spans two sequences), and a sliding window over more positions than one attention
// tile (64) with 2 query heads per kv head.
constexpr TpAttentionShape kAttentionShapes[] = {
    {2, 12, 12, 8, 4, 4, 0, false},
    {3, 4, 10, 4, 4, 6, 0, false},
    {1, 72, 8, 8, 4, 2, 40, false},
};

std::string describe(const TpAttentionShape& s, int tp) {
  return "attention tp " + std::to_string(tp) + (s.sequence_parallel ? " sp" : "") + " B" +
         std::to_string(s.batch) + " T" + std::to_string(s.seq) + " H" +
         std::to_string(s.n_heads) + " KV" + std::to_string(s.n_kv_heads) + " window " +
         std::to_string(s.window);
}

TEST_F(TpBlock, AttentionEqualsTheSingleProcessAttention) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (TpAttentionShape s : kAttentionShapes) {
      for (bool sp : {false, true}) {
        s.sequence_parallel = sp;
        const std::string what = describe(s, tp_size);
        const int64_t qd = s.n_heads * s.head_dim;
        const AttentionProblem p(s, 41);
        const AttentionLocal l = run_attention(*tp, s, p);
        expect_close(sp ? gather(*tp, l.y) : l.y, p.y, what + " y");
        expect_close(sp ? gather(*tp, l.dx) : l.dx, p.dx, what + " dx");
        expect_close(gather(*tp, l.dq), p.dq, what + " dq");
        expect_close(gather(*tp, l.dk), p.dk, what + " dk");
        expect_close(gather(*tp, l.dv), p.dv, what + " dv");
        expect_close(gather_cols(*tp, l.do_, s.d_model, qd), p.do_, what + " do");
      }
    }
  }
}

TEST_F(TpBlock, TheSameRunTwiceIsBitwiseIdentical) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (bool sp : {false, true}) {
      TpMlpShape m = kMlpShapes[0];
      m.sequence_parallel = sp;
      const MlpProblem mp(m, 53);
      const MlpLocal a = run_mlp(*tp, m, mp), b = run_mlp(*tp, m, mp);
      EXPECT_TRUE(bitwise_equal(a.y, b.y) && bitwise_equal(a.dx, b.dx) &&
                  bitwise_equal(a.dgate, b.dgate) && bitwise_equal(a.dup, b.dup) &&
                  bitwise_equal(a.ddown, b.ddown))
          << "mlp tp " << tp_size << " sp " << sp;
      TpAttentionShape s = kAttentionShapes[0];
      s.sequence_parallel = sp;
      const AttentionProblem ap(s, 53);
      const AttentionLocal c = run_attention(*tp, s, ap), d = run_attention(*tp, s, ap);
      EXPECT_TRUE(bitwise_equal(c.y, d.y) && bitwise_equal(c.dx, d.dx) &&
                  bitwise_equal(c.dq, d.dq) && bitwise_equal(c.dk, d.dk) &&
                  bitwise_equal(c.dv, d.dv) && bitwise_equal(c.do_, d.do_))
          << describe(s, tp_size);
    }
  }
}

// A first layer passes a null dx: it skips the input gradient and its collective on every rank
// (dx stays untouched), while the weight gradients still accumulate (+=) onto what they held.
TEST_F(TpBlock, NullInputGradientLeavesAccumulatedWeightGradients) {
  const Backward first_layer{false, 1.0f};
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (bool sp : {false, true}) {
      const std::string what = "tp " + std::to_string(tp_size) + (sp ? " sp" : "");
      TpMlpShape m = kMlpShapes[0];
      m.sequence_parallel = sp;
      const MlpProblem mp(m, 61);
      const MlpLocal ml = run_mlp(*tp, m, mp, first_layer);
      EXPECT_EQ(ml.dx, zeros(ml.dx.size())) << what;
      expect_close(gather(*tp, ml.dgate), plus(mp.dgate, 1.0f), what + " mlp dgate");
      expect_close(gather(*tp, ml.dup), plus(mp.dup, 1.0f), what + " mlp dup");
      expect_close(gather_cols(*tp, ml.ddown, m.d_model, m.d_ff), plus(mp.ddown, 1.0f),
                   what + " mlp ddown");
      TpAttentionShape s = kAttentionShapes[0];
      s.sequence_parallel = sp;
      const AttentionProblem ap(s, 61);
      const AttentionLocal al = run_attention(*tp, s, ap, first_layer);
      EXPECT_EQ(al.dx, zeros(al.dx.size())) << what;
      expect_close(gather(*tp, al.dq), plus(ap.dq, 1.0f), what + " attention dq");
      expect_close(gather(*tp, al.dk), plus(ap.dk, 1.0f), what + " attention dk");
      expect_close(gather(*tp, al.dv), plus(ap.dv, 1.0f), what + " attention dv");
      expect_close(gather_cols(*tp, al.do_, s.d_model, s.n_heads * s.head_dim),
                   plus(ap.do_, 1.0f), what + " attention do");
    }
  }
}

// Every rank refuses alike and returns: were one rank to communicate, the next collective of
// this test (the split of the next tp group, or the verdict) would hang or fail.
TEST_F(TpBlock, LayoutsTpDoesNotDivideAreRefusedOnEveryRank) {
  for (int tp_size : tp_sizes()) {
    if (tp_size == 1) continue;
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    std::vector<float> buf(4096, 0.0f);
    float* b = buf.data();
    const ops::RopeTable rope = ops::make_rope_table(8, 4, 10000.0);
    TpAttentionActs acts;
    // tp 2: 3 heads; tp 4: 6 heads. Then 2 tp heads over tp / 2 kv heads.
    const int64_t heads = tp_size + tp_size / 2;
    const Status h = tp_attention_forward(*tp, {1, 8, 8, heads, heads, 4, 0, false}, rope,
                                          {b, b, b, b}, b, acts, b);
    const Status kv = tp_attention_backward(*tp, {1, 8, 8, 2 * tp_size, tp_size / 2, 4, 0, true},
                                            rope, {b, b, b, b}, b, acts, b, b, {b, b, b, b});
    TpMlpActs mlp_acts;
    const Status ff = tp_mlp_forward(*tp, {4, 4, 3 * tp_size + 1, false}, {b, b, b}, b,
                                     mlp_acts, b);
    EXPECT_NE(h.message().find("must divide model.n_heads"), std::string::npos) << h.to_string();
    EXPECT_NE(kv.message().find("must divide model.n_kv_heads"), std::string::npos)
        << kv.to_string();
    EXPECT_NE(ff.message().find("must divide model.d_ff"), std::string::npos) << ff.to_string();
    EXPECT_EQ(tp_mlp_backward(*tp, {4 * tp_size + 1, 4, 4 * tp_size, true}, {b, b, b}, b,
                              mlp_acts, b, b, {b, b, b})
                  .code(),
              StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace ms::parallel
