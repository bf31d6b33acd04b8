// The table every training operator joins. For each case:
//   1. forward: the fp32 operator against its double-precision reference (tests/ops/
//      reference_ops.h), within fwd_tol relative to the largest reference output;
//   2. backward: the fp32 analytic input gradients of L = sum(dout * out) against central
//      differences of the double reference (step 1e-6), within grad_tol relative to the largest
//      gradient of that input;
//   3. guard bands: every output and gradient buffer sits between sentinel bands that must be
//      intact after the call, and gradients start from random values so that backward ops are
//      seen to accumulate (+=) rather than overwrite.
// A new operator adds one entry to all_cases().
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "ops/moe.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "tests/ops/guarded.h"
#include "tests/ops/reference_ops.h"

namespace ms::ops {
namespace {

namespace ref = ms::test::ref;
using ref::Vec;
using Ins = std::vector<const float*>;
using Grads = std::vector<float*>;
using RefIns = std::vector<Vec>;

struct Input {
  Input(std::string n, std::vector<float> v) : name(std::move(n)), values(std::move(v)) {}
  std::string name;
  std::vector<float> values;
  bool differentiable = true;
};

struct OpCase {
  OpCase(std::string n, std::vector<Input> in, size_t out)
      : name(std::move(n)), inputs(std::move(in)), output_size(out) {}
  std::string name;
  std::vector<Input> inputs;
  size_t output_size = 0;
  std::function<void(const Ins&, float* out)> forward;
  // Accumulates d(sum(dout * out))/d(input i) into grads[i] (null for non-differentiable).
  std::function<void(const Ins&, const float* dout, const Grads& grads)> backward;
  std::function<Vec(const RefIns&)> reference;
  bool uniform_dout = false;  // the op only takes one upstream scale (fused cross-entropy)
  double fwd_tol = 2e-6;
  double grad_tol = 2e-5;
};

std::vector<float> uniform(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  return test::random_floats(n, rng, lo, hi);
}

std::vector<int32_t> random_ids(size_t n, int32_t range, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % static_cast<uint64_t>(range));
  return ids;
}

// Runs fn on a guarded scratch buffer of n floats and checks its bands afterwards.
template <typename Fn>
std::vector<float> with_guarded(size_t n, const std::string& what, Fn fn) {
  test::Guarded<float> buffer(n);
  fn(buffer.data());
  EXPECT_TRUE(buffer.guards_intact()) << what << " wrote outside its buffer";
  return std::vector<float>(buffer.data(), buffer.data() + n);
}

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

Vec widen_all(const std::vector<float>& v) { return Vec(v.begin(), v.end()); }

// --- cases -----------------------------------------------------------------------------------

OpCase embedding_case() {
  const int64_t vocab = 7, d = 5, n = 12;
  const std::vector<int32_t> ids = random_ids(n, vocab, 1);
  OpCase c{"embedding", {{"table", uniform(vocab * d, 2)}}, size_t(n * d)};
  c.forward = [=](const Ins& in, float* out) { embedding_forward(ids.data(), in[0], out, n, d); };
  c.backward = [=](const Ins&, const float* dout, const Grads& g) {
    embedding_backward(ids.data(), dout, g[0], n, d);
  };
  c.reference = [=](const RefIns& in) { return ref::embedding(ids, in[0], d); };
  return c;
}

OpCase rmsnorm_case() {
  const int64_t n = 6, d = 9;
  const float eps = 1e-5f;
  OpCase c{"rmsnorm", {{"x", uniform(n * d, 3)}, {"weight", uniform(d, 4, 0.5f, 1.5f)}},
           size_t(n * d)};
  c.forward = [=](const Ins& in, float* out) {
    with_guarded(n, "rmsnorm rstd", [&](float* rstd) { rmsnorm_forward(in[0], in[1], out, rstd, n, d, eps); });
  };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    std::vector<float> out(n * d), rstd(n);
    rmsnorm_forward(in[0], in[1], out.data(), rstd.data(), n, d, eps);
    rmsnorm_backward(in[0], in[1], rstd.data(), dout, g[0], g[1], n, d);
  };
  c.reference = [=](const RefIns& in) { return ref::rmsnorm(in[0], in[1], n, d, eps); };
  return c;
}

OpCase linear_case() {
  const int64_t n = 7, in_f = 6, out_f = 5;
  OpCase c{"linear", {{"x", uniform(n * in_f, 5)}, {"w", uniform(out_f * in_f, 6)}},
           size_t(n * out_f)};
  c.forward = [=](const Ins& in, float* out) { linear_forward(in[0], in[1], out, n, in_f, out_f); };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    linear_backward(in[0], in[1], dout, g[0], g[1], n, in_f, out_f);
  };
  c.reference = [=](const RefIns& in) { return ref::linear(in[0], in[1], n, in_f, out_f); };
  return c;
}

// Three groups of rows (3, 0 and 4 rows): an expert with no tokens must work too.
OpCase grouped_linear_case() {
  const int64_t in_f = 4, out_f = 3;
  const std::vector<int64_t> offsets = {0, 3, 3, 7};
  OpCase c{"grouped_linear",
           {{"x", uniform(7 * in_f, 7)}, {"w0", uniform(out_f * in_f, 8)},
            {"w1", uniform(out_f * in_f, 9)}, {"w2", uniform(out_f * in_f, 10)}},
           size_t(7 * out_f)};
  c.forward = [=](const Ins& in, float* out) {
    const float* w[3] = {in[1], in[2], in[3]};
    grouped_linear_forward(in[0], w, offsets.data(), 3, out, in_f, out_f);
  };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    const float* w[3] = {in[1], in[2], in[3]};
    float* dw[3] = {g[1], g[2], g[3]};
    grouped_linear_backward(in[0], w, offsets.data(), 3, dout, g[0], dw, in_f, out_f);
  };
  c.reference = [=](const RefIns& in) {
    Vec y;
    for (int g = 0; g < 3; ++g) {
      const int64_t r0 = offsets[g], rows = offsets[g + 1] - r0;
      const Vec x(in[0].begin() + r0 * in_f, in[0].begin() + (r0 + rows) * in_f);
      const Vec part = ref::linear(x, in[1 + g], rows, in_f, out_f);
      y.insert(y.end(), part.begin(), part.end());
    }
    return y;
  };
  return c;
}

OpCase rope_case() {
  const int64_t b = 2, t = 5, heads = 3, hd = 8;
  const double theta = 500.0;
  const RopeTable table = make_rope_table(t + 2, hd, theta);
  const size_t n = size_t(b * t * heads * hd);
  OpCase c{"rope", {{"x", uniform(n, 11)}}, n};
  c.forward = [=](const Ins& in, float* out) {
    std::copy(in[0], in[0] + n, out);
    rope_forward(out, table, b, t, heads);
  };
  c.backward = [=](const Ins&, const float* dout, const Grads& g) {
    std::vector<float> dx = with_guarded(n, "rope_backward", [&](float* buf) {
      std::copy(dout, dout + n, buf);
      rope_backward(buf, table, b, t, heads);
    });
    for (size_t i = 0; i < n; ++i) g[0][i] += dx[i];
  };
  c.reference = [=](const RefIns& in) { return ref::rope(in[0], b, t, heads, hd, theta); };
  return c;
}

// Tiles of 4 positions over 11 (a ragged last tile) exercise the online softmax across tiles.
OpCase attention_case(const std::string& name, int64_t heads, int64_t kv_heads, int64_t window) {
  AttentionShape s;
  s.batch = 2;
  s.seq = 11;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.head_dim = 4;
  s.window = window;
  s.block = 4;
  const size_t nq = size_t(s.batch * s.seq * heads * s.head_dim);
  const size_t nkv = size_t(s.batch * s.seq * kv_heads * s.head_dim);
  const size_t nlse = size_t(s.batch * heads * s.seq);
  OpCase c{name,
           {{"q", uniform(nq, 12, -2, 2)}, {"k", uniform(nkv, 13, -2, 2)}, {"v", uniform(nkv, 14)}},
           nq};
  c.forward = [=](const Ins& in, float* out) {
    with_guarded(nlse, name + " lse", [&](float* lse) { attention_forward(s, in[0], in[1], in[2], out, lse); });
  };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    std::vector<float> out(nq), lse(nlse);
    attention_forward(s, in[0], in[1], in[2], out.data(), lse.data());
    attention_backward(s, in[0], in[1], in[2], out.data(), lse.data(), dout, g[0], g[1], g[2]);
  };
  const ref::AttentionDims rd{s.batch, s.seq, heads, kv_heads, s.head_dim, window};
  c.reference = [=](const RefIns& in) { return ref::attention(in[0], in[1], in[2], rd); };
  return c;
}

OpCase swiglu_case() {
  const size_t n = 40;
  OpCase c{"swiglu", {{"gate", uniform(n, 15, -4, 4)}, {"up", uniform(n, 16)}}, n};
  c.forward = [=](const Ins& in, float* out) { swiglu_forward(in[0], in[1], out, n); };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    swiglu_backward(in[0], in[1], dout, g[0], g[1], n);
  };
  c.reference = [](const RefIns& in) { return ref::swiglu(in[0], in[1]); };
  return c;
}

OpCase softmax_case() {
  const int64_t n = 5, e = 6;
  OpCase c{"softmax", {{"x", uniform(n * e, 17, -3, 3)}}, size_t(n * e)};
  c.forward = [=](const Ins& in, float* out) { softmax_forward(in[0], out, n, e); };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    std::vector<float> p(n * e);
    softmax_forward(in[0], p.data(), n, e);
    softmax_backward(p.data(), dout, g[0], n, e);
  };
  c.reference = [=](const RefIns& in) { return ref::softmax(in[0], n, e); };
  return c;
}

OpCase cross_entropy_case() {
  const int64_t n = 6, vocab = 11;
  const std::vector<int32_t> targets = random_ids(n, vocab, 18);
  OpCase c{"cross_entropy", {{"logits", uniform(n * vocab, 19, -5, 5)}}, size_t(n)};
  c.uniform_dout = true;
  c.forward = [=](const Ins& in, float* out) {
    std::vector<float> logits(in[0], in[0] + n * vocab);
    softmax_cross_entropy(logits.data(), targets.data(), out, n, vocab, 0.0f, false);
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), in[0])) << "logits changed without write_grad";
  };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    std::vector<float> losses(n);
    const std::vector<float> dlogits = with_guarded(n * vocab, "cross_entropy grad", [&](float* buf) {
      std::copy(in[0], in[0] + n * vocab, buf);
      softmax_cross_entropy(buf, targets.data(), losses.data(), n, vocab, dout[0], true);
    });
    for (int64_t i = 0; i < n * vocab; ++i) g[0][i] += dlogits[i];
  };
  c.reference = [=](const RefIns& in) { return ref::cross_entropy(in[0], targets, vocab); };
  return c;
}

// Router probabilities with distinct values per row, so the top-k choice is stable under the
// finite-difference steps.
constexpr int64_t kMoeTokens = 9, kMoeExperts = 5, kMoeTopK = 2, kMoeDim = 3;

std::vector<float> moe_probs() {
  std::vector<float> logits = uniform(kMoeTokens * kMoeExperts, 20, -2, 2);
  std::vector<float> probs(logits.size());
  softmax_forward(logits.data(), probs.data(), kMoeTokens, kMoeExperts);
  return probs;
}

MoeRouting moe_fixture_routing() {
  const std::vector<float> probs = moe_probs();
  std::vector<float> weights(kMoeTokens * kMoeTopK);
  return moe_route(probs.data(), weights.data(), kMoeTokens, kMoeExperts, kMoeTopK);
}

OpCase moe_route_case() {
  const int64_t n = kMoeTokens, e = kMoeExperts, k = kMoeTopK;
  OpCase c{"moe_route_weights", {{"probs", moe_probs()}}, size_t(n * k)};
  c.forward = [=](const Ins& in, float* out) { moe_route(in[0], out, n, e, k); };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    std::vector<float> weights(n * k);
    const MoeRouting r = moe_route(in[0], weights.data(), n, e, k);
    moe_route_backward(in[0], weights.data(), r, dout, g[0]);
  };
  c.reference = [=](const RefIns& in) {
    return ref::routing_weights(in[0], ref::top_k(in[0], n, e, k), e, k);
  };
  return c;
}

// xp[row_of[i, s]] = x[i]: the reference places each token's copies by the fixture routing.
Vec reference_permute(const Vec& x, const MoeRouting& r, int64_t d) {
  Vec xp(r.tokens * r.top_k * d);
  for (int64_t a = 0; a < r.tokens * r.top_k; ++a) {
    for (int64_t c = 0; c < d; ++c) xp[r.row_of[a] * d + c] = x[(a / r.top_k) * d + c];
  }
  return xp;
}

OpCase moe_permute_case() {
  const MoeRouting r = moe_fixture_routing();
  const int64_t d = kMoeDim;
  OpCase c{"moe_permute", {{"x", uniform(kMoeTokens * d, 21)}}, size_t(kMoeTokens * kMoeTopK * d)};
  c.forward = [=](const Ins& in, float* out) { moe_permute_forward(in[0], r, out, d); };
  c.backward = [=](const Ins&, const float* dout, const Grads& g) {
    moe_permute_backward(dout, r, g[0], d);
  };
  c.reference = [=](const RefIns& in) { return reference_permute(in[0], r, d); };
  return c;
}

OpCase moe_unpermute_case() {
  const MoeRouting r = moe_fixture_routing();
  const int64_t d = kMoeDim, n = kMoeTokens, k = kMoeTopK;
  OpCase c{"moe_unpermute",
           {{"expert_out", uniform(n * k * d, 22)}, {"weights", uniform(n * k, 23, 0, 1)}},
           size_t(n * d)};
  c.forward = [=](const Ins& in, float* out) { moe_unpermute_forward(in[0], in[1], r, out, d); };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    moe_unpermute_backward(in[0], in[1], r, dout, g[0], g[1], d);
  };
  c.reference = [=](const RefIns& in) {
    Vec y(n * d, 0.0);
    for (int64_t a = 0; a < n * k; ++a) {
      for (int64_t col = 0; col < d; ++col) {
        y[(a / k) * d + col] += in[1][a] * in[0][r.row_of[a] * d + col];
      }
    }
    return y;
  };
  return c;
}

OpCase moe_aux_loss_case() {
  const MoeRouting r = moe_fixture_routing();
  OpCase c{"moe_aux_loss", {{"probs", moe_probs()}}, 1};
  c.forward = [=](const Ins& in, float* out) { out[0] = static_cast<float>(moe_aux_loss(in[0], r)); };
  c.backward = [=](const Ins&, const float* dout, const Grads& g) {
    moe_aux_loss_backward(r, dout[0], g[0]);
  };
  c.reference = [=](const RefIns& in) { return Vec{ref::aux_loss(in[0], r.expert, kMoeExperts)}; };
  return c;
}

// The router z-loss, mean_i logsumexp_i(logits)^2, with the backward the model runs: the
// softmax of the logits and the kept lse, scale 2 dz / n.
OpCase moe_z_loss_case() {
  const int64_t n = 7, e = 5;
  OpCase c{"moe_z_loss", {{"logits", uniform(n * e, 41, -3, 3)}}, 1};
  c.forward = [=](const Ins& in, float* out) {
    std::vector<float> lse(n);
    out[0] = static_cast<float>(moe_z_loss(in[0], lse.data(), n, e) / static_cast<double>(n));
  };
  c.backward = [=](const Ins& in, const float* dout, const Grads& g) {
    std::vector<float> p(n * e), lse(n);
    softmax_forward(in[0], p.data(), n, e);
    moe_z_loss(in[0], lse.data(), n, e);
    moe_z_loss_backward(p.data(), lse.data(), 2.0f * dout[0] / static_cast<float>(n), g[0], n,
                        e);
  };
  c.reference = [=](const RefIns& in) {
    double z = 0;
    for (int64_t i = 0; i < n; ++i) {
      double mx = in[0][static_cast<size_t>(i * e)];
      for (int64_t j = 1; j < e; ++j) mx = std::max(mx, in[0][static_cast<size_t>(i * e + j)]);
      double sum = 0;
      for (int64_t j = 0; j < e; ++j) sum += std::exp(in[0][static_cast<size_t>(i * e + j)] - mx);
      const double lse = mx + std::log(sum);
      z += lse * lse;
    }
    return Vec{z / static_cast<double>(n)};
  };
  return c;
}

std::vector<OpCase> all_cases() {
  return {embedding_case(),
          rmsnorm_case(),
          linear_case(),
          grouped_linear_case(),
          rope_case(),
          attention_case("attention_mha", 2, 2, 0),
          attention_case("attention_gqa", 4, 2, 0),
          attention_case("attention_window", 4, 1, 3),
          attention_case("attention_window_wide", 2, 1, 6),
          swiglu_case(),
          softmax_case(),
          cross_entropy_case(),
          moe_route_case(),
          moe_permute_case(),
          moe_unpermute_case(),
          moe_aux_loss_case(),
          moe_z_loss_case()};
}

// --- harness ---------------------------------------------------------------------------------

RefIns reference_inputs(const OpCase& c) {
  RefIns in;
  for (const Input& x : c.inputs) in.push_back(widen_all(x.values));
  return in;
}

double weighted_sum(const Vec& out, const std::vector<float>& dout) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
  return s;
}

// Central differences of sum(dout * reference(inputs)) with respect to input `which`.
Vec numeric_gradient(const OpCase& c, size_t which, const std::vector<float>& dout) {
  RefIns in = reference_inputs(c);
  Vec grad(in[which].size());
  const double h = 1e-6;
  for (size_t i = 0; i < grad.size(); ++i) {
    const double x = in[which][i];
    in[which][i] = x + h;
    const double plus = weighted_sum(c.reference(in), dout);
    in[which][i] = x - h;
    const double minus = weighted_sum(c.reference(in), dout);
    in[which][i] = x;
    grad[i] = (plus - minus) / (2 * h);
  }
  return grad;
}

class OpGradTest : public testing::TestWithParam<OpCase> {};

TEST_P(OpGradTest, ForwardMatchesDoubleReference) {
  const OpCase& c = GetParam();
  std::vector<test::Guarded<float>> inputs;
  Ins ptrs;
  for (const Input& x : c.inputs) inputs.emplace_back(x.values);
  for (auto& x : inputs) ptrs.push_back(x.data());
  test::Guarded<float> out(c.output_size);
  c.forward(ptrs, out.data());
  EXPECT_TRUE(out.guards_intact()) << c.name << " wrote outside its output";
  const Vec expected = c.reference(reference_inputs(c));
  ASSERT_EQ(expected.size(), c.output_size);
  const double tol = c.fwd_tol * std::max(1.0, max_abs(expected));
  for (size_t i = 0; i < c.output_size; ++i) {
    ASSERT_NEAR(out[i], expected[i], tol) << c.name << " output " << i;
  }
}

TEST_P(OpGradTest, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const OpCase& c = GetParam();
  std::vector<float> dout = uniform(c.output_size, 99);
  if (c.uniform_dout) std::fill(dout.begin(), dout.end(), 0.37f);
  std::vector<test::Guarded<float>> grads;
  std::vector<std::vector<float>> initial;
  Ins ptrs;
  Grads gptrs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    initial.push_back(uniform(c.inputs[i].values.size(), 100 + i));
    grads.emplace_back(initial.back());
    ptrs.push_back(c.inputs[i].values.data());
  }
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    gptrs.push_back(c.inputs[i].differentiable ? grads[i].data() : nullptr);
  }
  c.backward(ptrs, dout.data(), gptrs);
  for (size_t w = 0; w < c.inputs.size(); ++w) {
    if (!c.inputs[w].differentiable) continue;
    EXPECT_TRUE(grads[w].guards_intact()) << c.name << " wrote outside d" << c.inputs[w].name;
    const Vec numeric = numeric_gradient(c, w, dout);
    const double tol = c.grad_tol * std::max(1e-2, max_abs(numeric));
    for (size_t i = 0; i < numeric.size(); ++i) {
      const double analytic = double{grads[w][i]} - initial[w][i];
      ASSERT_NEAR(analytic, numeric[i], tol) << c.name << " d" << c.inputs[w].name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, OpGradTest, testing::ValuesIn(all_cases()),
                         [](const testing::TestParamInfo<OpCase>& info) { return info.param.name; });

}  // namespace
}  // namespace ms::ops
