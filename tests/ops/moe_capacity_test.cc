// MoE capacity (ops/moe.h): an expert keeps at most `capacity` assignments, the earliest tokens
// first; dropped (token, slot) pairs leave the permutation and contribute nothing forward or
// backward; the load-balancing loss still counts what the router chose.
#include <gtest/gtest.h>

#include <vector>

#include "ops/moe.h"

namespace ms::ops {
namespace {

// 4 tokens, 2 experts, top-1: every token prefers expert 0 except token 2.
std::vector<float> probs() { return {0.9f, 0.1f, 0.8f, 0.2f, 0.3f, 0.7f, 0.6f, 0.4f}; }

TEST(MoeCapacity, KeepsTheEarliestTokensPerExpert) {
  const std::vector<float> p = probs();
  std::vector<float> w(4);
  MoeRouting r = moe_route(p.data(), w.data(), 4, 2, 1);
  ASSERT_EQ(r.rows(), 4);
  moe_apply_capacity(r, 2);
  // Expert 0 was chosen by tokens 0, 1, 3: token 3 is dropped.
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(r.rows(), 3);
  EXPECT_EQ(r.row_of[3], -1);
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(r.token_of_row, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(r.routed, (std::vector<int64_t>{3, 1}));
}

TEST(MoeCapacity, DroppedAssignmentsContributeNothing) {
  const std::vector<float> p = probs();
  std::vector<float> w(4);
  MoeRouting r = moe_route(p.data(), w.data(), 4, 2, 1);
  moe_apply_capacity(r, 2);
  const std::vector<float> x = {1, 2, 3, 4};  // d = 1
  std::vector<float> xp(3), y(4), dyp(3, 0.0f), dw(4, 0.0f), dx(4, 0.0f);
  moe_permute_forward(x.data(), r, xp.data(), 1);
  EXPECT_EQ(xp, (std::vector<float>{1, 2, 3}));
  moe_unpermute_forward(xp.data(), w.data(), r, y.data(), 1);
  EXPECT_EQ(y[3], 0.0f);  // token 3 lost its only expert
  EXPECT_FLOAT_EQ(y[0], w[0] * 1.0f);
  const std::vector<float> dy = {1, 1, 1, 1};
  moe_unpermute_backward(xp.data(), w.data(), r, dy.data(), dyp.data(), dw.data(), 1);
  EXPECT_EQ(dw[3], 0.0f);
  moe_permute_backward(dyp.data(), r, dx.data(), 1);
  EXPECT_EQ(dx[3], 0.0f);
  EXPECT_GT(dx[0], 0.0f);
}

TEST(MoeCapacity, TheAuxLossCountsTheRouterChoices) {
  const std::vector<float> p = probs();
  std::vector<float> w(4);
  MoeRouting r = moe_route(p.data(), w.data(), 4, 2, 1);
  const double before = moe_aux_loss(p.data(), r);
  moe_apply_capacity(r, 1);
  EXPECT_EQ(r.dropped, 2);
  EXPECT_DOUBLE_EQ(moe_aux_loss(p.data(), r), before);
}

TEST(MoeCapacity, CapacityFromTheFactor) {
  EXPECT_EQ(moe_capacity(0.0, 64, 4, 2), 0);   // dropless
  EXPECT_EQ(moe_capacity(1.0, 64, 4, 2), 32);  // 64 * 2 / 4
  EXPECT_EQ(moe_capacity(1.25, 10, 4, 2), 7);  // ceil(6.25)
  EXPECT_EQ(moe_capacity(0.01, 4, 8, 1), 1);   // at least one
  std::vector<float> w(4);
  const std::vector<float> p = probs();
  MoeRouting r = moe_route(p.data(), w.data(), 4, 2, 1);
  moe_apply_capacity(r, 0);
  EXPECT_EQ(r.dropped, 0);
  EXPECT_EQ(r.rows(), 4);
}

}  // namespace
}  // namespace ms::ops
