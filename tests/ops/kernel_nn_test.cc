// The layer kernels (kernels/nn.cuh: SwiGLU, softmax, RMSNorm, RoPE) against their CPU twins
// in lib/ops on seeded inputs of awkward shapes (a single element, odd widths, rows wider than
// a block, many rows per dweight chunk). Outputs that accumulate start from non-zero values;
// device outputs sit between guard bands; every kernel runs twice and must repeat its bits.
// Tolerances: 1e-5 * (1 + |cpu|) where expf or a double row sum's order differs from the CPU
// (a few fp32 ulps in practice); exact where the kernel rounds every step as the CPU does.
// Without a GPU the twin tests skip with the reason; the argument checks run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/nn.cuh"
#include "ops/activation.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "tests/ops/device_twin.h"

namespace ms::kernels {
namespace {

using test::DeviceGuarded;
using test::expect_near_all;
using test::expect_same_bits;
using test::relative;
using test::succeeded;
using test::upload;

constexpr double kTolerance = 1e-5;

std::vector<float> random_floats(int64_t n, std::mt19937_64& rng, float lo = -4, float hi = 4) {
  return test::random_floats(static_cast<size_t>(n), rng, lo, hi);
}

class LayerKernelTest : public test::GpuTwinTest {};

// ---- SwiGLU ----

TEST_F(LayerKernelTest, SwigluForwardAndBackwardMatchTheCpu) {
  std::mt19937_64 rng(1);
  for (const int64_t n : {int64_t{1}, int64_t{31}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    auto gate = random_floats(n, rng, -12, 12);
    if (n > 3) {  // exp(100) overflows: silu(-100) is -0 and its slope 0
      gate[0] = -100.0f, gate[1] = 100.0f, gate[2] = 0.0f;
    }
    const auto up = random_floats(n, rng), dout = random_floats(n, rng);
    const auto dgate0 = random_floats(n, rng), dup0 = random_floats(n, rng);
    const DeviceBuffer d_gate = upload(gate), d_up = upload(up), d_dout = upload(dout);

    std::vector<float> out(static_cast<size_t>(n)), dgate = dgate0, dup = dup0;
    ops::swiglu_forward(gate.data(), up.data(), out.data(), n);
    ops::swiglu_backward(gate.data(), up.data(), dout.data(), dgate.data(), dup.data(), n);

    std::vector<float> runs[2][3];
    for (auto& run : runs) {
      DeviceGuarded<float> g_out(std::vector<float>(out.size(), 7.0f)), g_dgate(dgate0),
          g_dup(dup0);
      ASSERT_TRUE(succeeded(swiglu_forward(d_gate.as<float>(), d_up.as<float>(), g_out.get(), n)));
      ASSERT_TRUE(succeeded(swiglu_backward(d_gate.as<float>(), d_up.as<float>(),
                                            d_dout.as<float>(), g_dgate.get(), g_dup.get(), n)));
      run[0] = g_out.values(), run[1] = g_dgate.values(), run[2] = g_dup.values();
    }
    expect_near_all(runs[0][0], out, relative(kTolerance), "swiglu out");
    expect_near_all(runs[0][1], dgate, relative(kTolerance), "swiglu dgate");
    expect_near_all(runs[0][2], dup, relative(kTolerance), "swiglu dup");
    for (int k = 0; k < 3; ++k) expect_same_bits(runs[0][k], runs[1][k], "swiglu");
  }
}

// ---- Softmax (the router's rows) ----

const std::pair<int64_t, int64_t> kSoftmaxShapes[] = {{1, 1}, {5, 8}, {33, 64}, {7, 100},
                                                      {300, 33}, {2, 1000}};

TEST_F(LayerKernelTest, SoftmaxForwardMatchesTheCpuAlsoInPlaceAndForLargeLogits) {
  std::mt19937_64 rng(2);
  for (const auto& [n, e] : kSoftmaxShapes) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", e = " + std::to_string(e));
    auto x = random_floats(n * e, rng);
    for (int64_t j = 0; j < e; ++j) x[j] = x[j] * 1000.0f + 5e4f;  // row 0: large, spread out
    std::vector<float> p(x.size());
    ops::softmax_forward(x.data(), p.data(), n, e);
    const DeviceBuffer d_x = upload(x);

    std::vector<float> runs[2];
    for (auto& run : runs) {
      DeviceGuarded<float> g_p(std::vector<float>(p.size(), -3.0f));
      ASSERT_TRUE(succeeded(softmax_forward(d_x.as<float>(), g_p.get(), n, e)));
      run = g_p.values();
    }
    expect_near_all(runs[0], p, relative(kTolerance), "softmax p");
    expect_same_bits(runs[0], runs[1], "softmax p");

    DeviceGuarded<float> in_place(x);  // p == x, as the CPU allows
    ASSERT_TRUE(succeeded(softmax_forward(in_place.get(), in_place.get(), n, e)));
    expect_same_bits(in_place.values(), runs[0], "softmax in place");
  }
}

TEST_F(LayerKernelTest, SoftmaxBackwardAccumulatesLikeTheCpu) {
  std::mt19937_64 rng(3);
  for (const auto& [n, e] : kSoftmaxShapes) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", e = " + std::to_string(e));
    std::vector<float> p(static_cast<size_t>(n * e));
    ops::softmax_forward(random_floats(n * e, rng).data(), p.data(), n, e);
    const auto dp = random_floats(n * e, rng), dx0 = random_floats(n * e, rng);
    std::vector<float> dx = dx0;
    ops::softmax_backward(p.data(), dp.data(), dx.data(), n, e);
    const DeviceBuffer d_p = upload(p), d_dp = upload(dp);

    std::vector<float> runs[2];
    for (auto& run : runs) {
      DeviceGuarded<float> g_dx(dx0);
      ASSERT_TRUE(succeeded(softmax_backward(d_p.as<float>(), d_dp.as<float>(), g_dx.get(), n, e)));
      run = g_dx.values();
    }
    expect_near_all(runs[0], dx, relative(kTolerance), "softmax dx");
    expect_same_bits(runs[0], runs[1], "softmax dx");
  }
}

// ---- RMSNorm ----

// Rows up to 20000: at most 256 dweight chunks, so the widest case has chunks of 79 rows.
const std::pair<int64_t, int64_t> kNormShapes[] = {{1, 1},    {3, 7},     {17, 256},
                                                   {64, 1000}, {65, 2049}, {130, 300},
                                                   {20000, 5}};

TEST_F(LayerKernelTest, RmsnormForwardMatchesTheCpuIncludingAZeroRow) {
  std::mt19937_64 rng(4);
  const float eps = 1e-5f;
  for (const auto& [n, d] : kNormShapes) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", d = " + std::to_string(d));
    auto x = random_floats(n * d, rng);
    if (n > 1) std::fill(x.begin() + d, x.begin() + 2 * d, 0.0f);  // rstd = 1 / sqrt(eps)
    const auto w = random_floats(d, rng, 0.5f, 1.5f);
    std::vector<float> out(x.size()), rstd(static_cast<size_t>(n));
    ops::rmsnorm_forward(x.data(), w.data(), out.data(), rstd.data(), n, d, eps);
    const DeviceBuffer d_x = upload(x), d_w = upload(w);

    std::vector<float> runs[2][2];
    for (auto& run : runs) {
      DeviceGuarded<float> g_out(std::vector<float>(out.size(), 9.0f)),
          g_rstd(std::vector<float>(rstd.size(), 9.0f));
      ASSERT_TRUE(succeeded(
          rmsnorm_forward(d_x.as<float>(), d_w.as<float>(), g_out.get(), g_rstd.get(), n, d, eps)));
      run[0] = g_out.values(), run[1] = g_rstd.values();
    }
    expect_near_all(runs[0][0], out, relative(kTolerance), "rmsnorm out");
    expect_near_all(runs[0][1], rstd, relative(kTolerance), "rmsnorm rstd");
    for (int k = 0; k < 2; ++k) expect_same_bits(runs[0][k], runs[1][k], "rmsnorm forward");
  }
}

struct NormBackward {
  std::vector<float> dx, dweight;
};

// Runs kernels::rmsnorm_backward from dx0 and dweight0 (twice: the runs must agree bitwise).
NormBackward gpu_rmsnorm_backward(const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& rstd, const std::vector<float>& dout,
                                  const std::vector<float>& dx0,
                                  const std::vector<float>& dweight0, int64_t n, int64_t d) {
  const DeviceBuffer d_x = upload(x), d_w = upload(w), d_rstd = upload(rstd),
                     d_dout = upload(dout);
  NormBackward runs[2];
  for (auto& run : runs) {
    DeviceGuarded<float> g_dx(dx0), g_dweight(dweight0);
    // Garbage in the scratch: the kernel must overwrite, not accumulate into, its partials.
    DeviceGuarded<float> scratch(std::vector<float>(rmsnorm_backward_scratch(n, d), 1e30f));
    EXPECT_TRUE(succeeded(rmsnorm_backward(d_x.as<float>(), d_w.as<float>(), d_rstd.as<float>(),
                                           d_dout.as<float>(), g_dx.get(), g_dweight.get(), n, d,
                                           scratch.get())));
    run.dx = g_dx.values(), run.dweight = g_dweight.values();
    scratch.values();  // its guard bands too
  }
  expect_same_bits(runs[0].dx, runs[1].dx, "rmsnorm dx");
  expect_same_bits(runs[0].dweight, runs[1].dweight, "rmsnorm dweight");
  return runs[0];
}

TEST_F(LayerKernelTest, RmsnormBackwardAccumulatesLikeTheCpu) {
  std::mt19937_64 rng(5);
  for (const auto& [n, d] : kNormShapes) {
    if (n > 1000) continue;  // the long sums are checked exactly below
    SCOPED_TRACE("n = " + std::to_string(n) + ", d = " + std::to_string(d));
    const auto x = random_floats(n * d, rng), dout = random_floats(n * d, rng);
    const auto w = random_floats(d, rng, 0.5f, 1.5f);
    const auto dx0 = random_floats(n * d, rng), dweight0 = random_floats(d, rng);
    std::vector<float> out(x.size()), rstd(static_cast<size_t>(n));
    ops::rmsnorm_forward(x.data(), w.data(), out.data(), rstd.data(), n, d, 1e-5f);
    std::vector<float> dx = dx0, dweight = dweight0;
    ops::rmsnorm_backward(x.data(), w.data(), rstd.data(), dout.data(), dx.data(), dweight.data(),
                          n, d);
    const NormBackward got = gpu_rmsnorm_backward(x, w, rstd, dout, dx0, dweight0, n, d);
    expect_near_all(got.dx, dx, relative(kTolerance), "rmsnorm dx");
    // dweight sums n products in chunks (the CPU in one run): rounding grows like sqrt(n) ulps
    // of the partial sums, well inside 1e-5 relative for n <= 1000 rows of values near 1.
    expect_near_all(got.dweight, dweight, relative(kTolerance), "rmsnorm dweight");
  }
}

// Small integers times rstd = 1/4 make every product and partial sum exact in fp32, whatever
// the order: dweight must then equal the CPU's bit for bit, so a row summed twice or skipped
// (a chunk boundary off by one) cannot hide inside a tolerance.
TEST_F(LayerKernelTest, RmsnormBackwardDweightIsExactWhenTheSumsAre) {
  std::mt19937_64 rng(6);
  std::uniform_int_distribution<int> small(-8, 8);
  for (const auto& [n, d] : kNormShapes) {
    SCOPED_TRACE("n = " + std::to_string(n) + ", d = " + std::to_string(d));
    std::vector<float> x(static_cast<size_t>(n * d)), dout(x.size()), w(static_cast<size_t>(d));
    for (float& v : x) v = static_cast<float>(small(rng));
    for (float& v : dout) v = static_cast<float>(small(rng));
    for (float& v : w) v = static_cast<float>(small(rng));
    const std::vector<float> rstd(static_cast<size_t>(n), 0.25f);
    std::vector<float> dweight0(w.size());
    for (float& v : dweight0) v = static_cast<float>(small(rng));
    std::vector<float> dx(x.size(), 0.0f), dweight = dweight0;
    ops::rmsnorm_backward(x.data(), w.data(), rstd.data(), dout.data(), dx.data(), dweight.data(),
                          n, d);
    const NormBackward got =
        gpu_rmsnorm_backward(x, w, rstd, dout, std::vector<float>(x.size(), 0.0f), dweight0, n, d);
    expect_near_all(got.dweight, dweight, test::exact(), "rmsnorm dweight (exact sums)");
    expect_near_all(got.dx, dx, relative(kTolerance), "rmsnorm dx");
  }
}

// ---- Rotary embeddings ----

struct RopeOnDevice {
  DeviceBuffer cos, sin;
  RopeTableView view;
};
RopeOnDevice upload_table(const ops::RopeTable& table) {
  RopeOnDevice t{upload(table.cos), upload(table.sin), {}};
  t.view = {t.cos.as<float>(), t.sin.as<float>(), table.seq_len, table.half};
  return t;
}

struct RopeShape {
  int64_t b, t, heads, head_dim;
};
const RopeShape kRopeShapes[] = {{1, 1, 1, 2}, {2, 7, 3, 8}, {3, 33, 4, 64}, {1, 200, 2, 128}};
constexpr int64_t kRopeSeqLen = 200;

// Both roundings per output are the CPU's (no FMA on either side for x86-64 builds), so the
// results are normally bitwise equal; 1e-6 leaves room for a host compiler that contracts.
constexpr double kRopeTolerance = 1e-6;

TEST_F(LayerKernelTest, RopeForwardAndBackwardMatchTheCpu) {
  std::mt19937_64 rng(7);
  for (const RopeShape& s : kRopeShapes) {
    SCOPED_TRACE("b = " + std::to_string(s.b) + ", t = " + std::to_string(s.t) +
                 ", head_dim = " + std::to_string(s.head_dim));
    const ops::RopeTable table = ops::make_rope_table(kRopeSeqLen, s.head_dim, 10000.0);
    RopeOnDevice dt = upload_table(table);
    const auto x = random_floats(s.b * s.t * s.heads * s.head_dim, rng);
    std::vector<float> fwd = x, bwd = x;
    ops::rope_forward(fwd.data(), table, s.b, s.t, s.heads);
    ops::rope_backward(bwd.data(), table, s.b, s.t, s.heads);
    std::vector<float> runs[2][2];
    for (auto& run : runs) {
      DeviceGuarded<float> g_fwd(x), g_bwd(x);
      ASSERT_TRUE(succeeded(rope_forward(g_fwd.get(), dt.view, s.b, s.t, s.heads)));
      ASSERT_TRUE(succeeded(rope_backward(g_bwd.get(), dt.view, s.b, s.t, s.heads)));
      run[0] = g_fwd.values(), run[1] = g_bwd.values();
    }
    expect_near_all(runs[0][0], fwd, relative(kRopeTolerance), "rope forward");
    expect_near_all(runs[0][1], bwd, relative(kRopeTolerance), "rope backward");
    for (int k = 0; k < 2; ++k) expect_same_bits(runs[0][k], runs[1][k], "rope");
  }
}

TEST_F(LayerKernelTest, RopeAtPositionsMatchesTheCpuAndLeavesOutOfRangeTokensAlone) {
  std::mt19937_64 rng(8);
  const int64_t n = 37, heads = 3, head_dim = 16;
  const ops::RopeTable table = ops::make_rope_table(kRopeSeqLen, head_dim, 500000.0);
  RopeOnDevice dt = upload_table(table);
  std::uniform_int_distribution<int64_t> pos(0, kRopeSeqLen - 1);
  std::vector<int64_t> positions(static_cast<size_t>(n));
  for (auto& p : positions) p = pos(rng);
  positions[0] = 0, positions[1] = kRopeSeqLen - 1, positions[2] = positions[3];  // edges, repeat
  const auto x = random_floats(n * heads * head_dim, rng);
  std::vector<float> fwd = x, bwd = x;
  ops::rope_forward_at(fwd.data(), table, positions.data(), n, heads);
  ops::rope_backward_at(bwd.data(), table, positions.data(), n, heads);
  const DeviceBuffer d_positions = upload(positions);
  DeviceGuarded<float> g_fwd(x), g_bwd(x);
  ASSERT_TRUE(succeeded(rope_forward_at(g_fwd.get(), dt.view, d_positions.as<int64_t>(), n,
                                        heads)));
  ASSERT_TRUE(succeeded(rope_backward_at(g_bwd.get(), dt.view, d_positions.as<int64_t>(), n,
                                         heads)));
  expect_near_all(g_fwd.values(), fwd, relative(kRopeTolerance), "rope_forward_at");
  expect_near_all(g_bwd.values(), bwd, relative(kRopeTolerance), "rope_backward_at");

  // Positions past either end of the table (the CPU twin's callers never pass them): those
  // tokens stay as they were, the others are rotated as usual.
  std::vector<int64_t> bad = positions;
  bad[5] = -1, bad[6] = kRopeSeqLen;
  const DeviceBuffer d_bad = upload(bad);
  DeviceGuarded<float> g_bad(x);
  ASSERT_TRUE(succeeded(rope_forward_at(g_bad.get(), dt.view, d_bad.as<int64_t>(), n, heads)));
  const std::vector<float> got = g_bad.values();
  const auto token = [&](const std::vector<float>& v, int64_t i) {
    return std::vector<float>(v.begin() + i * heads * head_dim,
                              v.begin() + (i + 1) * heads * head_dim);
  };
  for (int64_t i = 0; i < n; ++i) {
    const bool out_of_range = i == 5 || i == 6;
    expect_near_all(token(got, i), token(out_of_range ? x : fwd, i), relative(kRopeTolerance),
                    out_of_range ? "unrotated token" : "rotated token");
  }
}

// ---- Argument checks: answered before any CUDA call, so they pass without a GPU ----

bool contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}
alignas(64) float host[4096];

TEST(LayerKernelArgsTest, NullPointersAreNamed) {
  Status s = swiglu_forward(nullptr, host, host + 64, 8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "kernels::swiglu_forward: gate is null")) << s.message();
  s = swiglu_backward(host, host + 8, host + 16, host + 24, nullptr, 8);
  EXPECT_TRUE(contains(s, "kernels::swiglu_backward: dup is null")) << s.message();
  s = softmax_forward(host, nullptr, 2, 4);
  EXPECT_TRUE(contains(s, "kernels::softmax_forward: p is null")) << s.message();
  s = softmax_backward(host, host + 64, nullptr, 2, 4);
  EXPECT_TRUE(contains(s, "kernels::softmax_backward: dx is null")) << s.message();
  s = rmsnorm_forward(host, host + 64, host + 128, nullptr, 2, 4, 1e-5f);
  EXPECT_TRUE(contains(s, "kernels::rmsnorm_forward: rstd is null")) << s.message();
  s = rmsnorm_backward(host, host + 64, host + 128, host + 192, host + 256, host + 320, 2, 4,
                       nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "kernels::rmsnorm_backward: scratch is null")) << s.message();
  const RopeTableView table{host, host + 64, 8, 4};
  s = rope_forward_at(host + 128, table, nullptr, 3, 2);
  EXPECT_TRUE(contains(s, "kernels::rope_forward_at: positions is null")) << s.message();
  s = rope_backward(host + 128, RopeTableView{nullptr, host, 8, 4}, 1, 2, 2);
  EXPECT_TRUE(contains(s, "kernels::rope_backward: table.cos is null")) << s.message();
}

TEST(LayerKernelArgsTest, BadShapesAreInvalidArgumentNamingTheArgument) {
  Status s = swiglu_forward(host, host + 64, host + 128, -1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "n is -1")) << s.message();
  s = softmax_forward(host, host + 64, 3, 0);
  EXPECT_TRUE(contains(s, "kernels::softmax_forward: e is 0")) << s.message();
  s = rmsnorm_forward(host, host + 64, host + 128, host + 192, 2, 0, 1e-5f);
  EXPECT_TRUE(contains(s, "kernels::rmsnorm_forward: d is 0")) << s.message();
  const RopeTableView table{host, host + 64, 8, 4};
  s = rope_forward(host + 128, table, 1, 9, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "t is 9 but the rope table covers only 8")) << s.message();
  s = rope_forward(host + 128, RopeTableView{host, host + 64, 8, 0}, 1, 2, 2);
  EXPECT_TRUE(contains(s, "table.half is 0")) << s.message();
  s = rope_forward_at(host + 128, table, reinterpret_cast<const int64_t*>(host), -2, 2);
  EXPECT_TRUE(contains(s, "kernels::rope_forward_at: n is -2")) << s.message();
}

TEST(LayerKernelArgsTest, OverlapsThatWouldRaceAreRejected) {
  Status s = swiglu_forward(host, host + 64, host + 4, 8);  // out overlaps gate
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "out and gate overlap")) << s.message();
  s = softmax_forward(host, host + 1, 2, 4);  // shifted in-place
  EXPECT_TRUE(contains(s, "partially overlap")) << s.message();
  // dx == dout would let the dweight pass read overwritten gradients.
  s = rmsnorm_backward(host, host + 64, host + 128, host + 256, host + 256, host + 512, 2, 4,
                       host + 1024);
  EXPECT_TRUE(contains(s, "dx and dout overlap")) << s.message();
}

TEST(LayerKernelArgsTest, EmptyWorkSucceedsWithoutTouchingCuda) {
  EXPECT_TRUE(swiglu_forward(nullptr, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(swiglu_backward(nullptr, nullptr, nullptr, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(softmax_forward(nullptr, nullptr, 0, 8).ok());
  EXPECT_TRUE(softmax_backward(nullptr, nullptr, nullptr, 0, 0).ok());
  EXPECT_TRUE(rmsnorm_forward(nullptr, host, nullptr, nullptr, 0, 4, 1e-5f).ok());
  EXPECT_TRUE(rmsnorm_backward(nullptr, host, nullptr, nullptr, nullptr, host, 0, 4, nullptr).ok());
  const RopeTableView table{host, host + 64, 8, 4};
  EXPECT_TRUE(rope_forward(nullptr, table, 0, 8, 2).ok());
  EXPECT_TRUE(rope_forward(nullptr, table, 2, 8, 0).ok());
  EXPECT_TRUE(rope_backward_at(nullptr, table, nullptr, 0, 2).ok());
}

TEST(LayerKernelArgsTest, RmsnormScratchCoversOneRowOfPartialsPerChunk) {
  EXPECT_EQ(rmsnorm_backward_scratch(0, 16), 0u);
  EXPECT_EQ(rmsnorm_backward_scratch(5, 0), 0u);
  EXPECT_EQ(rmsnorm_backward_scratch(1, 16), 16u);     // one chunk
  EXPECT_EQ(rmsnorm_backward_scratch(64, 16), 16u);    // still one chunk of 64 rows
  EXPECT_EQ(rmsnorm_backward_scratch(65, 16), 32u);    // two chunks
  EXPECT_EQ(rmsnorm_backward_scratch(1 << 20, 16), 256u * 16u);  // capped at 256 chunks
}

}  // namespace
}  // namespace ms::kernels
