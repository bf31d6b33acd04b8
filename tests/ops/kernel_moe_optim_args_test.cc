// The argument checks of the MoE, optimizer and memory kernels: every entry point rejects null
// or misaligned pointers, negative or inconsistent sizes and overlapping buffers with an
// InvalidArgument that names the op and the argument, and calls with no work succeed. All of
// this happens before any CUDA call, so these tests run on machines without a GPU; host memory
// stands in for device pointers (nothing is dereferenced).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "kernels/memory_ops.cuh"
#include "kernels/moe.cuh"
#include "kernels/optimizer.cuh"

namespace ms::kernels {
namespace {

alignas(64) float floats[256];
alignas(64) double doubles[4];
alignas(64) int64_t indices[64];
alignas(64) int32_t experts[64];

// InvalidArgument whose message contains `op` and `part`.
void expect_invalid(const Status& s, const std::string& op, const std::string& part) {
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find(op), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(part), std::string::npos) << s.message();
}

const float* misaligned() {
  return reinterpret_cast<const float*>(reinterpret_cast<const char*>(floats) + 2);
}

// A consistent routing of 4 tokens, 3 experts, top 2, 8 rows (contents are never read).
MoeRoutingView routing() {
  return {4, 3, 2, 8, experts, indices, indices + 8, indices + 16, indices + 32};
}

TEST(MoeOptimArgsTest, MemoryOpsRejectBadArguments) {
  expect_invalid(fill(nullptr, 4, 1.0f), "kernels::fill", "x is null");
  expect_invalid(fill(floats, -1, 1.0f), "kernels::fill", "n is negative");
  expect_invalid(copy(misaligned(), floats, 4), "kernels::copy", "src is not aligned");
  expect_invalid(copy(floats, nullptr, 4), "kernels::copy", "dst is null");
  expect_invalid(copy(floats, floats + 8, -2), "kernels::copy", "n is negative");
  expect_invalid(gather_rows(floats, nullptr, 3, 2, floats + 64), "kernels::gather_rows",
                 "rows is null");
  expect_invalid(gather_rows(floats, indices, 3, -2, floats + 64), "kernels::gather_rows",
                 "width is negative");
  expect_invalid(scatter_rows(floats, indices, -1, 2, floats + 64), "kernels::scatter_rows",
                 "count is negative");
  expect_invalid(scatter_rows(nullptr, indices, 3, 2, floats + 64), "kernels::scatter_rows",
                 "src is null");
  expect_invalid(add_to_columns(floats, floats + 4, 2, 8), "kernels::add_to_columns", "overlap");
  expect_invalid(add_to_columns(floats, nullptr, 2, 8), "kernels::add_to_columns",
                 "column is null");
  expect_invalid(add_to_columns(floats, floats + 64, 2, -8), "kernels::add_to_columns",
                 "cols is negative");
}

TEST(MoeOptimArgsTest, MemoryOpsWithNoWorkSucceedWithoutTouchingCuda) {
  EXPECT_TRUE(fill(nullptr, 0, 1.0f).ok());
  EXPECT_TRUE(copy(nullptr, nullptr, 0).ok());
  EXPECT_TRUE(copy(floats, floats, 64).ok()) << "copy onto itself has nothing to move";
  EXPECT_TRUE(gather_rows(nullptr, nullptr, 0, 5, nullptr).ok());
  EXPECT_TRUE(gather_rows(nullptr, indices, 3, 0, nullptr).ok());
  EXPECT_TRUE(scatter_rows(nullptr, nullptr, 0, 5, nullptr).ok());
  EXPECT_TRUE(add_to_columns(nullptr, floats, 0, 5).ok());
}

TEST(MoeOptimArgsTest, OptimizerOpsRejectBadArguments) {
  const ops::AdamCoefficients c;
  float* w = floats;
  float* g = floats + 32;
  float* m = floats + 64;
  float* v = floats + 96;
  float* d = floats + 128;
  expect_invalid(kernels::adamw_update(c, true, w, nullptr, m, v, 8), "kernels::adamw_update",
                 "g is null");
  expect_invalid(kernels::adamw_update(c, true, w, g, m, v, -8), "kernels::adamw_update",
                 "n is negative");
  expect_invalid(kernels::adamw_update(c, true, w, g, w + 4, v, 8), "kernels::adamw_update",
                 "overlap");
  expect_invalid(kernels::lamb_direction(c, false, w, g, m, v, d, nullptr, 8),
                 "kernels::lamb_direction", "norms is null");
  expect_invalid(kernels::lamb_direction(c, false, w, g, m, v, v, doubles, 8),
                 "kernels::lamb_direction", "overlap");
  expect_invalid(kernels::lamb_direction(c, false, w, g, m, v, d, doubles, 8 + 32),
                 "kernels::lamb_direction", "overlap");
  expect_invalid(kernels::lamb_update(1.0f, misaligned(), w, 4), "kernels::lamb_update",
                 "d is not aligned");
  expect_invalid(kernels::lamb_update(1.0f, d, w, -1), "kernels::lamb_update", "n is negative");
  expect_invalid(sum_of_squares_f64(floats, 8, nullptr), "kernels::sum_of_squares_f64",
                 "out is null");
  expect_invalid(sum_of_squares_f64(nullptr, 8, doubles), "kernels::sum_of_squares_f64",
                 "x is null");
  expect_invalid(sum_of_squares_f64(floats, -8, doubles), "kernels::sum_of_squares_f64",
                 "n is negative");
}

TEST(MoeOptimArgsTest, OptimizerUpdatesWithNoWorkSucceedWithoutTouchingCuda) {
  const ops::AdamCoefficients c;
  EXPECT_TRUE(kernels::adamw_update(c, true, nullptr, nullptr, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(kernels::lamb_update(1.0f, nullptr, nullptr, 0).ok());
}

TEST(MoeOptimArgsTest, MoeOpsRejectMalformedRoutings) {
  const char* op = "kernels::moe_permute_forward";
  const auto permute = [&](const MoeRoutingView& r) {
    return moe_permute_forward(floats, r, floats + 128, 2, nullptr);
  };
  MoeRoutingView r = routing();
  EXPECT_TRUE(r.rows <= r.tokens * r.top_k);
  r.top_k = 4;  // more than the 3 experts
  expect_invalid(permute(r), op, "routing sizes out of range");
  r = routing();
  r.experts = 0;
  expect_invalid(permute(r), op, "experts=0");
  r = routing();
  r.rows = 9;  // more than tokens * top_k
  expect_invalid(permute(r), op, "rows=9");
  r = routing();
  r.tokens = -1;
  expect_invalid(permute(r), op, "tokens=-1");
  r = routing();
  r.row_of = nullptr;
  expect_invalid(permute(r), op, "r.row_of is null");
  r = routing();
  r.routed = nullptr;
  expect_invalid(moe_aux_loss_backward(r, 1.0f, floats), "kernels::moe_aux_loss_backward",
                 "r.routed is null");
  r = routing();
  r.offsets = reinterpret_cast<const int64_t*>(reinterpret_cast<const char*>(indices) + 4);
  expect_invalid(permute(r), op, "r.offsets is not aligned");
}

TEST(MoeOptimArgsTest, MoeOpsRejectBadBuffersAndSizes) {
  const MoeRoutingView r = routing();
  float* a = floats;        // 4 tokens x 3 experts, or 8 weights
  float* b = floats + 32;
  float* big = floats + 64;  // up to 8 rows x 16
  expect_invalid(moe_route_backward(a, b, r, nullptr, floats + 48), "kernels::moe_route_backward",
                 "dweights is null");
  expect_invalid(moe_route_backward(a, b, r, b, a + 4), "kernels::moe_route_backward", "overlap");
  expect_invalid(moe_permute_forward(a, r, big, -1), "kernels::moe_permute_forward",
                 "d is negative");
  expect_invalid(moe_permute_backward(nullptr, r, a, 2), "kernels::moe_permute_backward",
                 "dxp is null");
  expect_invalid(moe_permute_backward(big, r, big + 3, 2), "kernels::moe_permute_backward",
                 "overlap");
  expect_invalid(moe_unpermute_forward(big, b, r, nullptr, 2), "kernels::moe_unpermute_forward",
                 "y is null");
  expect_invalid(moe_unpermute_backward(big, b, r, a, floats + 200, nullptr, 2),
                 "kernels::moe_unpermute_backward", "dweights is null");
  expect_invalid(moe_unpermute_backward(big, b, r, a, big, floats + 200, 2),
                 "kernels::moe_unpermute_backward", "overlap");
  expect_invalid(moe_aux_loss(a, r, nullptr), "kernels::moe_aux_loss", "out is null");
  expect_invalid(moe_aux_loss(nullptr, r, doubles), "kernels::moe_aux_loss", "probs is null");
  expect_invalid(moe_probability_sums(a, 4, -3, doubles), "kernels::moe_probability_sums",
                 "e is negative");
  expect_invalid(moe_probability_sums(a, 4, 3, nullptr), "kernels::moe_probability_sums",
                 "sums is null");
  expect_invalid(moe_z_loss(a, b, 4, 0, doubles), "kernels::moe_z_loss", "e is 0");
  expect_invalid(moe_z_loss(a, b, -4, 3, doubles), "kernels::moe_z_loss", "n is negative");
  expect_invalid(moe_z_loss(a, a + 2, 4, 3, doubles), "kernels::moe_z_loss", "overlap");
  expect_invalid(moe_z_loss_backward(a, nullptr, 1.0f, big, 4, 3), "kernels::moe_z_loss_backward",
                 "lse is null");
  expect_invalid(moe_z_loss_backward(a, b, 1.0f, a, 4, 3), "kernels::moe_z_loss_backward",
                 "overlap");
}

TEST(MoeOptimArgsTest, MoeOpsWithNoWorkSucceedWithoutTouchingCuda) {
  MoeRoutingView empty = routing();
  empty.tokens = 0;
  empty.rows = 0;
  EXPECT_TRUE(moe_route_backward(nullptr, nullptr, empty, nullptr, nullptr).ok());
  EXPECT_TRUE(moe_permute_forward(nullptr, empty, nullptr, 16).ok());
  EXPECT_TRUE(moe_permute_backward(nullptr, empty, nullptr, 16).ok());
  EXPECT_TRUE(moe_unpermute_forward(nullptr, nullptr, empty, nullptr, 16).ok());
  EXPECT_TRUE(moe_unpermute_backward(nullptr, nullptr, empty, nullptr, nullptr, nullptr, 16).ok());
  EXPECT_TRUE(moe_aux_loss_backward(empty, 1.0f, nullptr).ok());
  EXPECT_TRUE(moe_probability_sums(nullptr, 5, 0, nullptr).ok());
  EXPECT_TRUE(moe_z_loss_backward(nullptr, nullptr, 1.0f, nullptr, 0, 3).ok());
  // d = 0: rows of nothing.
  EXPECT_TRUE(moe_permute_forward(nullptr, routing(), nullptr, 0).ok());
}

}  // namespace
}  // namespace ms::kernels
