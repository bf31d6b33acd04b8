// The MoE, optimizer and memory kernels (kernels/moe.cuh, optimizer.cuh, memory_ops.cuh) against
// their CPU twins in lib/ops. Routings are built on the host by ops::moe_route (top_k 1 and 2,
// an expert that no token picks, capacity drops by ops::moe_apply_capacity) and uploaded, as the
// CUDA backend does. Every device output sits between sentinel guard bands, outputs that the
// twin accumulates into start from random values, and every op runs twice from the same state
// and must repeat its bits. Ops the twin computes with the same fp32 operations in the same
// order must match it exactly; the tolerances of the others are stated where they are checked.
// Without a GPU the device tests skip; the argument checks run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/device.h"
#include "kernels/memory_ops.cuh"
#include "kernels/moe.cuh"
#include "kernels/optimizer.cuh"
#include "ops/elementwise.h"
#include "ops/moe.h"
#include "ops/optimizer.h"
#include "ops/reduce.h"
#include "tests/ops/device_buffers.h"
#include "tests/ops/guarded.h"

namespace ms::kernels {
namespace {

using Rng = std::mt19937_64;
using test::succeeded;

class MoeOptimGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> count = device_count();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();
  }
};

// A device copy of a guarded host array, guard bands included; fetch() copies it all back.
template <typename T>
class DeviceGuarded {
 public:
  explicit DeviceGuarded(const std::vector<T>& initial)
      : host_(initial), buffer_(test::upload(host_.storage(), host_.storage_bytes() / sizeof(T))) {}
  T* data() { return buffer_.as<T>() + test::kGuardElements; }
  test::Guarded<T> fetch() {
    succeeded(copy_to_host(host_.storage(), buffer_.data(), host_.storage_bytes()));
    return host_;
  }

 private:
  test::Guarded<T> host_;
  DeviceBuffer buffer_;
};

template <typename T>
DeviceBuffer upload(const std::vector<T>& values) {
  return test::upload(values.data(), values.size());
}

bool same_value(double got, double expected) {
  return got == expected || (std::isnan(got) && std::isnan(expected));
}

// Every element within tolerance(i) of the twin (0: the same value; NaN matches NaN), and the
// guard bands intact.
template <typename T>
void expect_matches(const test::Guarded<T>& got, const std::vector<T>& expected,
                    const std::function<double(size_t)>& tolerance, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  EXPECT_TRUE(got.guards_intact()) << what << " wrote outside its output";
  size_t reported = 0;
  for (size_t i = 0; i < expected.size() && reported < 5; ++i) {
    const double g = got[i], e = expected[i];
    if (same_value(g, e) || std::fabs(g - e) <= tolerance(i)) continue;
    ADD_FAILURE() << what << "[" << i << "]: gpu " << g << " cpu " << e << " tolerance "
                  << tolerance(i);
    ++reported;
  }
}
template <typename T>
void expect_exact(const test::Guarded<T>& got, const std::vector<T>& expected,
                  const std::string& what) {
  expect_matches<T>(got, expected, [](size_t) { return 0.0; }, what);
}

// Two runs from the same state must give the same bytes.
template <typename T>
void expect_same_bits(const test::Guarded<T>& first, const test::Guarded<T>& second,
                      const std::string& what) {
  EXPECT_EQ(std::memcmp(first.data(), second.data(), first.size() * sizeof(T)), 0)
      << what << ": two runs differ";
}

// Runs `op` twice, each on fresh device copies of `initial`, checks that the runs agree bit for
// bit, and returns the first run's outputs.
template <typename T>
std::vector<test::Guarded<T>> run_twice(
    const std::vector<std::vector<T>>& initial,
    const std::function<Status(std::vector<T*>&)>& op, const std::string& what) {
  std::vector<std::vector<test::Guarded<T>>> runs;
  for (int run = 0; run < 2; ++run) {
    std::vector<DeviceGuarded<T>> outputs;
    outputs.reserve(initial.size());
    std::vector<T*> pointers;
    for (const auto& values : initial) pointers.push_back(outputs.emplace_back(values).data());
    succeeded(op(pointers));
    succeeded(synchronize(nullptr));
    runs.emplace_back();
    for (auto& output : outputs) runs.back().push_back(output.fetch());
  }
  for (size_t i = 0; i < initial.size(); ++i) {
    expect_same_bits(runs[0][i], runs[1][i], what + " output " + std::to_string(i));
  }
  return std::move(runs[0]);
}

// ---- MoE ----

struct RoutingCase {
  int64_t n, e, k, d;
  double capacity_factor;  // 0: dropless
};
std::string describe(const RoutingCase& c) {
  return "n=" + std::to_string(c.n) + " e=" + std::to_string(c.e) + " k=" + std::to_string(c.k) +
         " d=" + std::to_string(c.d) + " capacity_factor=" + std::to_string(c.capacity_factor);
}

// Odd sizes, one token and one expert, no tokens, drops, more than one column block (e > 32)
// and more than one token chunk (n > 256) in the probability sums, d above a warp's width.
const RoutingCase kRoutingCases[] = {
    {1, 1, 1, 1, 0},     {37, 5, 2, 33, 0},   {64, 8, 2, 16, 1.0},   {300, 6, 1, 7, 0.5},
    {0, 4, 2, 8, 0},     {513, 40, 2, 70, 0}, {40000, 4, 1, 2, 1.25}, {19, 3, 3, 5, 0},
};

// Softmax-like rows (positive, summing to 1); when k < e the last expert gets probability 0, so
// no token picks it and its group is empty.
std::vector<float> router_probs(const RoutingCase& c, Rng& rng) {
  std::vector<float> probs = test::random_floats(static_cast<size_t>(c.n * c.e), rng, 0.05f, 1.0f);
  for (int64_t i = 0; i < c.n; ++i) {
    float* row = probs.data() + i * c.e;
    if (c.k < c.e) row[c.e - 1] = 0.0f;
    const float total = std::accumulate(row, row + c.e, 0.0f);
    for (int64_t j = 0; j < c.e; ++j) row[j] /= total;
  }
  return probs;
}

// An ops::MoeRouting and its device copy.
struct UploadedRouting {
  ops::MoeRouting host;
  DeviceBuffer expert, offsets, row_of, token_of_row, routed;
  MoeRoutingView view() const {
    return {host.tokens, host.experts, host.top_k, host.rows(),
            expert.as<int32_t>(), offsets.as<int64_t>(), row_of.as<int64_t>(),
            token_of_row.as<int64_t>(), routed.as<int64_t>()};
  }
};
void upload_routing(UploadedRouting& u) {
  u.expert = upload(u.host.expert);
  u.offsets = upload(u.host.offsets);
  u.row_of = upload(u.host.row_of);
  u.token_of_row = upload(u.host.token_of_row);
  u.routed = upload(u.host.routed);
}

// Relative tolerance of sums in double whose order differs from the CPU's left-to-right sum:
// the CPU's error alone may reach (terms) * 2^-53 of the sum of magnitudes, 1.2e-10 at 2^20
// terms (the tree's is smaller); a wrong or missing term is far larger.
constexpr double kDoubleSumTolerance = 1e-9;

void check_moe_case(const RoutingCase& c, Rng& rng) {
  SCOPED_TRACE(describe(c));
  const auto nd = static_cast<size_t>(c.n * c.d), ne = static_cast<size_t>(c.n * c.e),
             nk = static_cast<size_t>(c.n * c.k);
  const std::vector<float> probs = router_probs(c, rng);
  std::vector<float> weights(nk);
  UploadedRouting r;
  r.host = ops::moe_route(probs.data(), weights.data(), c.n, c.e, c.k);
  if (c.capacity_factor > 0) {
    ops::moe_apply_capacity(r.host, ops::moe_capacity(c.capacity_factor, c.n, c.e, c.k));
  }
  upload_routing(r);
  const MoeRoutingView view = r.view();
  const auto rd = static_cast<size_t>(r.host.rows() * c.d);
  const DeviceBuffer d_probs = upload(probs), d_weights = upload(weights);

  {  // route backward: accumulates into dprobs
    const auto dweights = test::random_floats(nk, rng, -1.0f, 1.0f);
    const auto dprobs0 = test::random_floats(ne, rng, -1.0f, 1.0f);
    std::vector<float> expected = dprobs0;
    ops::moe_route_backward(probs.data(), weights.data(), r.host, dweights.data(),
                            expected.data());
    const DeviceBuffer d_dweights = upload(dweights);
    const auto got = run_twice<float>({dprobs0}, [&](auto& out) {
      return moe_route_backward(d_probs.as<float>(), d_weights.as<float>(), view,
                                d_dweights.as<float>(), out[0]);
    }, "moe_route_backward");
    expect_exact(got[0], expected, "moe_route_backward dprobs");
  }
  const auto x = test::random_floats(nd, rng);
  const DeviceBuffer d_x = upload(x);
  {  // permute forward: overwrites xp
    std::vector<float> expected(rd);
    ops::moe_permute_forward(x.data(), r.host, expected.data(), c.d);
    const auto got = run_twice<float>({test::random_floats(rd, rng)}, [&](auto& out) {
      return moe_permute_forward(d_x.as<float>(), view, out[0], c.d);
    }, "moe_permute_forward");
    expect_exact(got[0], expected, "moe_permute_forward xp");
  }
  const auto yp = test::random_floats(rd, rng);
  const DeviceBuffer d_yp = upload(yp);
  {  // permute backward: accumulates into dx; dropped slots add nothing
    const auto dx0 = test::random_floats(nd, rng);
    std::vector<float> expected = dx0;
    ops::moe_permute_backward(yp.data(), r.host, expected.data(), c.d);
    const auto got = run_twice<float>({dx0}, [&](auto& out) {
      return moe_permute_backward(d_yp.as<float>(), view, out[0], c.d);
    }, "moe_permute_backward");
    expect_exact(got[0], expected, "moe_permute_backward dx");
  }
  {  // unpermute forward: overwrites y (a token with every slot dropped gets 0)
    std::vector<float> expected(nd);
    ops::moe_unpermute_forward(yp.data(), weights.data(), r.host, expected.data(), c.d);
    const auto got = run_twice<float>({test::random_floats(nd, rng)}, [&](auto& out) {
      return moe_unpermute_forward(d_yp.as<float>(), d_weights.as<float>(), view, out[0], c.d);
    }, "moe_unpermute_forward");
    expect_exact(got[0], expected, "moe_unpermute_forward y");
  }
  {  // unpermute backward: accumulates into dyp (exact) and dweights (a dot product over d)
    const auto dy = test::random_floats(nd, rng);
    const auto dyp0 = test::random_floats(rd, rng), dweights0 = test::random_floats(nk, rng);
    std::vector<float> expected_dyp = dyp0, expected_dweights = dweights0;
    ops::moe_unpermute_backward(yp.data(), weights.data(), r.host, dy.data(),
                                expected_dyp.data(), expected_dweights.data(), c.d);
    // Both sides sum the d products in fp32, in different orders: each is within
    // d * 2^-24 * sum|products| of the exact dot (4.2e-6 at d = 70), plus a rounding of the
    // accumulated result.
    std::vector<double> dot_scale(nk, 0.0);
    for (size_t a = 0; a < nk; ++a) {
      const int64_t row = r.host.row_of[a];
      if (row < 0) continue;
      const float* g = dy.data() + (a / c.k) * c.d;
      for (int64_t col = 0; col < c.d; ++col) {
        dot_scale[a] += std::fabs(double{g[col]} * yp[static_cast<size_t>(row * c.d + col)]);
      }
    }
    const DeviceBuffer d_dy = upload(dy);
    const auto got = run_twice<float>({dyp0, dweights0}, [&](auto& out) {
      return moe_unpermute_backward(d_yp.as<float>(), d_weights.as<float>(), view,
                                    d_dy.as<float>(), out[0], out[1], c.d);
    }, "moe_unpermute_backward");
    expect_exact(got[0], expected_dyp, "moe_unpermute_backward dyp");
    expect_matches<float>(got[1], expected_dweights, [&](size_t a) {
      return 1e-5 * (1 + std::fabs(expected_dweights[a]) + dot_scale[a]);
    }, "moe_unpermute_backward dweights");
  }
  {  // aux loss and its pieces: double sums over the tokens
    std::vector<double> expected_sums(static_cast<size_t>(c.e));
    ops::moe_probability_sums(probs.data(), c.n, c.e, expected_sums.data());
    const auto sums = run_twice<double>({std::vector<double>(c.e, 42.0)},
                                        [&](auto& out) {
      return moe_probability_sums(d_probs.as<float>(), c.n, c.e, out[0]);
    }, "moe_probability_sums");
    expect_matches<double>(sums[0], expected_sums, [&](size_t j) {
      return kDoubleSumTolerance * (1 + std::fabs(expected_sums[j]));
    }, "moe_probability_sums");
    const double expected_aux = ops::moe_aux_loss(probs.data(), r.host);
    const auto aux = run_twice<double>({{42.0}}, [&](auto& out) {
      return moe_aux_loss(d_probs.as<float>(), view, out[0]);
    }, "moe_aux_loss");
    expect_matches<double>(aux[0], {expected_aux}, [&](size_t) {
      return kDoubleSumTolerance * (1 + std::fabs(expected_aux));
    }, "moe_aux_loss");
    const auto dprobs0 = test::random_floats(ne, rng, -1.0f, 1.0f);
    std::vector<float> expected = dprobs0;
    ops::moe_aux_loss_backward(r.host, 0.37f, expected.data());
    const auto got = run_twice<float>({dprobs0}, [&](auto& out) {
      return moe_aux_loss_backward(view, 0.37f, out[0]);
    }, "moe_aux_loss_backward");
    expect_exact(got[0], expected, "moe_aux_loss_backward dprobs");
  }
  {  // z-loss: lse per token, the sum of its squares, and the backward
    const auto logits = test::random_floats(ne, rng, -6.0f, 6.0f);
    std::vector<float> expected_lse(static_cast<size_t>(c.n));
    const double expected_z = ops::moe_z_loss(logits.data(), expected_lse.data(), c.n, c.e);
    const DeviceBuffer d_logits = upload(logits);
    std::vector<test::Guarded<double>> z_runs;  // the scalar output of each run
    const auto lse = run_twice<float>({test::random_floats(c.n, rng)}, [&](auto& out) {
      DeviceGuarded<double> z_out({42.0});
      const Status s = moe_z_loss(d_logits.as<float>(), out[0], c.n, c.e, z_out.data());
      if (s.ok() && succeeded(synchronize(nullptr))) z_runs.push_back(z_out.fetch());
      return s;
    }, "moe_z_loss lse");
    ASSERT_EQ(z_runs.size(), 2u);
    expect_same_bits(z_runs[0], z_runs[1], "moe_z_loss z");
    // lse is max + log(sum of exponentials in double): the doubles differ by a few units of
    // 2^-53 (order, exp/log ulps), so the fp32 result may round one ulp apart.
    expect_matches<float>(lse[0], expected_lse, [&](size_t i) {
      return 1e-12 + 2.4e-7 * std::fabs(expected_lse[i]);
    }, "moe_z_loss lse");
    // z from the device's own lse, summed on the host in double: differs only in order.
    double z_of_gpu_lse = 0;
    for (size_t i = 0; i < lse[0].size(); ++i) z_of_gpu_lse += double{lse[0][i]} * lse[0][i];
    const test::Guarded<double>& z = z_runs[0];
    expect_matches<double>(z, {z_of_gpu_lse}, [&](size_t) {
      return kDoubleSumTolerance * (1 + z_of_gpu_lse);
    }, "moe_z_loss z");
    EXPECT_NEAR(z[0], expected_z, 1e-6 * (1 + expected_z));
    const float scale = 2.0f * 0.01f / static_cast<float>(std::max<int64_t>(c.n, 1));
    const DeviceBuffer d_lse = upload(expected_lse);
    const auto dlogits0 = test::random_floats(ne, rng, -1.0f, 1.0f);
    std::vector<float> expected = dlogits0;
    ops::moe_z_loss_backward(probs.data(), expected_lse.data(), scale, expected.data(), c.n, c.e);
    const auto got = run_twice<float>({dlogits0}, [&](auto& out) {
      return moe_z_loss_backward(d_probs.as<float>(), d_lse.as<float>(), scale, out[0], c.n, c.e);
    }, "moe_z_loss_backward");
    expect_exact(got[0], expected, "moe_z_loss_backward dlogits");
  }
}

TEST_F(MoeOptimGpuTest, MoeKernelsMatchTheirCpuTwins) {
  Rng rng(4242);
  bool saw_drops = false, saw_empty_expert = false;
  for (const RoutingCase& c : kRoutingCases) {
    check_moe_case(c, rng);
    std::vector<float> weights(static_cast<size_t>(c.n * c.k));
    const std::vector<float> probs = router_probs(c, rng);
    ops::MoeRouting r = ops::moe_route(probs.data(), weights.data(), c.n, c.e, c.k);
    if (c.n > 0 && r.routed.back() == 0) saw_empty_expert = true;
    ops::moe_apply_capacity(r, ops::moe_capacity(c.capacity_factor, c.n, c.e, c.k));
    if (r.dropped > 0) saw_drops = true;
  }
  EXPECT_TRUE(saw_drops) << "no case dropped an assignment";
  EXPECT_TRUE(saw_empty_expert) << "no case left an expert without tokens";
}

// ---- Optimizer ----

ops::AdamCoefficients adam_coefficients() {
  ops::AdamCoefficients c;
  const double beta1 = 0.9, beta2 = 0.999;
  const int step = 3;
  c.lr = 1e-3f;
  c.grad_scale = 0.5f;
  c.beta1 = static_cast<float>(beta1);
  c.one_minus_beta1 = static_cast<float>(1 - beta1);
  c.beta2 = static_cast<float>(beta2);
  c.one_minus_beta2 = static_cast<float>(1 - beta2);
  c.inv_bias1 = static_cast<float>(1 / (1 - std::pow(beta1, step)));
  c.inv_sqrt_bias2 = static_cast<float>(1 / std::sqrt(1 - std::pow(beta2, step)));
  c.eps = 1e-8f;
  c.weight_decay = 0.1f;
  return c;
}

const size_t kOptimizerSizes[] = {0, 1, 31, 1000, (size_t{1} << 20) + 3};

TEST_F(MoeOptimGpuTest, AdamwUpdateMatchesTheCpuBitForBit) {
  Rng rng(7);
  const ops::AdamCoefficients c = adam_coefficients();
  for (size_t n : kOptimizerSizes) {
    for (bool decay : {true, false}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " weight_decay=" + std::to_string(decay));
      const auto w0 = test::random_floats(n, rng, -1.0f, 1.0f);
      const auto g = test::random_floats(n, rng, -2.0f, 2.0f);
      const auto m0 = test::random_floats(n, rng, -0.1f, 0.1f);
      const auto v0 = test::random_floats(n, rng, 0.0f, 0.01f);
      std::vector<float> w = w0, m = m0, v = v0;
      ops::adamw_update(c, decay, w.data(), g.data(), m.data(), v.data(), static_cast<int64_t>(n));
      const DeviceBuffer d_g = upload(g);
      const auto got = run_twice<float>({w0, m0, v0}, [&](auto& out) {
        return kernels::adamw_update(c, decay, out[0], d_g.as<float>(), out[1], out[2],
                            static_cast<int64_t>(n));
      }, "adamw_update");
      expect_exact(got[0], w, "adamw w");
      expect_exact(got[1], m, "adamw m");
      expect_exact(got[2], v, "adamw v");
    }
  }
}

TEST_F(MoeOptimGpuTest, LambPassesMatchTheCpu) {
  Rng rng(8);
  const ops::AdamCoefficients c = adam_coefficients();
  for (size_t n : kOptimizerSizes) {
    for (bool decay : {true, false}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " weight_decay=" + std::to_string(decay));
      const auto w0 = test::random_floats(n, rng, -1.0f, 1.0f);
      const auto g = test::random_floats(n, rng, -2.0f, 2.0f);
      const auto m0 = test::random_floats(n, rng, -0.1f, 0.1f);
      const auto v0 = test::random_floats(n, rng, 0.0f, 0.01f);
      const auto d0 = test::random_floats(n, rng);
      std::vector<float> m = m0, v = v0, d(n);
      std::vector<double> norms(2);
      const auto count = static_cast<int64_t>(n);
      ops::lamb_direction(c, decay, w0.data(), g.data(), m.data(), v.data(), d.data(),
                          norms.data(), count);
      const DeviceBuffer d_w = upload(w0), d_g = upload(g);
      std::vector<test::Guarded<double>> norm_runs;  // the norms of each run
      const auto got = run_twice<float>({m0, v0, d0}, [&](auto& out) {
        DeviceGuarded<double> d_norms({42.0, 42.0});
        const Status s = kernels::lamb_direction(c, decay, d_w.as<float>(), d_g.as<float>(),
                                                 out[0], out[1], out[2], d_norms.data(), count);
        if (s.ok() && succeeded(synchronize(nullptr))) norm_runs.push_back(d_norms.fetch());
        return s;
      }, "lamb_direction");
      ASSERT_EQ(norm_runs.size(), 2u);
      expect_same_bits(norm_runs[0], norm_runs[1], "lamb norms");
      expect_exact(got[0], m, "lamb m");
      expect_exact(got[1], v, "lamb v");
      expect_exact(got[2], d, "lamb d");
      // Squares of fp32 values are exact in double; the sums differ only in order.
      expect_matches<double>(norm_runs[0], norms, [&](size_t i) {
        return kDoubleSumTolerance * norms[i];
      }, "lamb norms");

      const float step = 1e-3f * 0.87f;
      std::vector<float> w = w0;
      ops::lamb_update(step, d.data(), w.data(), count);
      const DeviceBuffer d_d = upload(d);
      const auto updated = run_twice<float>({w0}, [&](auto& out) {
        return kernels::lamb_update(step, d_d.as<float>(), out[0], count);
      }, "lamb_update");
      expect_exact(updated[0], w, "lamb_update w");
    }
  }
}

TEST_F(MoeOptimGpuTest, SumOfSquaresF64MatchesTheCpuAndRepeatsItsBits) {
  Rng rng(9);
  for (size_t n : kOptimizerSizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x = test::random_floats(n, rng, -3.0f, 2.0f);
    const double expected = ops::sum_of_squares_f64(x.data(), n);
    const DeviceBuffer d_x = upload(x);
    const auto got = run_twice<double>({{42.0}}, [&](auto& out) {
      return sum_of_squares_f64(d_x.as<float>(), static_cast<int64_t>(n), out[0]);
    }, "sum_of_squares_f64");
    expect_matches<double>(got[0], {expected}, [&](size_t) {
      return kDoubleSumTolerance * expected;
    }, "sum_of_squares_f64");
  }
}

// ---- Memory ----

const int64_t kMemorySizes[] = {0, 1, 31, 1000, (int64_t{1} << 20) + 3};

TEST_F(MoeOptimGpuTest, FillAndAddToColumnsMatchTheCpu) {
  Rng rng(10);
  for (int64_t n : kMemorySizes) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const auto x0 = test::random_floats(static_cast<size_t>(n), rng);
    std::vector<float> expected = x0;
    ops::fill(expected.data(), static_cast<size_t>(n), -2.5f);
    const auto got = run_twice<float>({x0}, [&](auto& out) {
      return fill(out[0], n, -2.5f);
    }, "fill");
    expect_exact(got[0], expected, "fill");
  }
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{0, 5}, {3, 0}, {1, 1}, {37, 5},
                            {1000, 33}, {2, 70000}}) {
    SCOPED_TRACE("rows=" + std::to_string(rows) + " cols=" + std::to_string(cols));
    const auto x0 = test::random_floats(static_cast<size_t>(rows * cols), rng);
    const auto column = test::random_floats(static_cast<size_t>(cols), rng);
    std::vector<float> expected = x0;
    ops::add_to_columns(expected.data(), column.data(), rows, cols);
    const DeviceBuffer d_column = upload(column);
    const auto got = run_twice<float>({x0}, [&](auto& out) {
      return add_to_columns(out[0], d_column.as<float>(), rows, cols);
    }, "add_to_columns");
    expect_exact(got[0], expected, "add_to_columns");
  }
}

// copy inside one buffer: src at `from`, dst at `to`, overlapping when |from - to| < n.
TEST_F(MoeOptimGpuTest, CopyHasMemmoveSemantics) {
  Rng rng(11);
  struct CopyCase {
    int64_t n, from, to;
  };
  for (const CopyCase& c : {CopyCase{0, 0, 3}, CopyCase{1000, 0, 1000}, CopyCase{1000, 0, 1},
                            CopyCase{1000, 1, 0}, CopyCase{1000, 0, 999}, CopyCase{1000, 5, 5},
                            CopyCase{(int64_t{1} << 20) + 3, 7, 0},
                            CopyCase{(int64_t{1} << 20) + 3, 0, 4099}}) {
    SCOPED_TRACE("n=" + std::to_string(c.n) + " from=" + std::to_string(c.from) +
                 " to=" + std::to_string(c.to));
    const auto extent = static_cast<size_t>(c.n + std::max(c.from, c.to));
    const auto buffer0 = test::random_floats(extent, rng);
    std::vector<float> expected = buffer0;
    ops::copy(expected.data() + c.from, expected.data() + c.to, static_cast<size_t>(c.n));
    const auto got = run_twice<float>({buffer0}, [&](auto& out) {
      return copy(out[0] + c.from, out[0] + c.to, c.n);
    }, "copy");
    expect_exact(got[0], expected, "copy");
  }
}

TEST_F(MoeOptimGpuTest, GatherAndScatterRowsMatchTheCpu) {
  Rng rng(12);
  for (auto [table_rows, count, width] :
       {std::tuple<int64_t, int64_t, int64_t>{5, 0, 3}, {4, 3, 0}, {1, 1, 1}, {37, 20, 33},
        {1000, 999, 64}, {70000, 40000, 3}}) {
    SCOPED_TRACE("table_rows=" + std::to_string(table_rows) + " count=" + std::to_string(count) +
                 " width=" + std::to_string(width));
    const auto table = test::random_floats(static_cast<size_t>(table_rows * width), rng);
    const auto packed = test::random_floats(static_cast<size_t>(count * width), rng);
    // Gather may repeat rows; scatter's rows are distinct (a shuffled prefix of all rows).
    std::vector<int64_t> repeated(static_cast<size_t>(count)), distinct(table_rows);
    std::uniform_int_distribution<int64_t> pick(0, table_rows - 1);
    for (int64_t& row : repeated) row = pick(rng);
    std::iota(distinct.begin(), distinct.end(), 0);
    std::shuffle(distinct.begin(), distinct.end(), rng);
    distinct.resize(static_cast<size_t>(count));

    std::vector<float> gathered(packed.size());
    ops::gather_rows(table.data(), repeated.data(), count, width, gathered.data());
    const DeviceBuffer d_table = upload(table), d_repeated = upload(repeated);
    const auto got = run_twice<float>({packed}, [&](auto& out) {
      return gather_rows(d_table.as<float>(), d_repeated.as<int64_t>(), count, width, out[0]);
    }, "gather_rows");
    expect_exact(got[0], gathered, "gather_rows");

    std::vector<float> scattered = table;
    ops::scatter_rows(packed.data(), distinct.data(), count, width, scattered.data());
    const DeviceBuffer d_packed = upload(packed), d_distinct = upload(distinct);
    const auto put = run_twice<float>({table}, [&](auto& out) {
      return scatter_rows(d_packed.as<float>(), d_distinct.as<int64_t>(), count, width, out[0]);
    }, "scatter_rows");
    expect_exact(put[0], scattered, "scatter_rows");
  }
}

}  // namespace
}  // namespace ms::kernels
