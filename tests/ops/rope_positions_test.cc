// rope_forward_at / rope_backward_at (ops/rope.h): per-token positions, as document masking
// (positions restarting at each document) and context parallelism (chunks at their global
// positions) use them. Checked against the positional rope_forward, which op_grad_test checks
// against the double reference.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ops/rope.h"
#include "tests/ops/guarded.h"

namespace ms::ops {
namespace {

constexpr int64_t kHeads = 3, kHd = 8;

std::vector<float> random_tokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return test::random_floats(size_t(n * kHeads * kHd), rng, -1, 1);
}

TEST(RopePositions, SequencePositionsEqualRopeForward) {
  const RopeTable table = make_rope_table(16, kHd, 10000.0);
  const int64_t b = 2, t = 11;
  std::vector<float> x = random_tokens(b * t, 1), y = x;
  std::vector<int64_t> pos;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t i = 0; i < t; ++i) pos.push_back(i);
  }
  rope_forward(x.data(), table, b, t, kHeads);
  rope_forward_at(y.data(), table, pos.data(), b * t, kHeads);
  EXPECT_EQ(x, y);
  rope_backward(x.data(), table, b, t, kHeads);
  rope_backward_at(y.data(), table, pos.data(), b * t, kHeads);
  EXPECT_EQ(x, y);
}

// Two documents packed as [0..4] then [0..6]: each is rotated as if it were alone.
TEST(RopePositions, RestartingPositionsRotateEachDocumentAsAlone) {
  const RopeTable table = make_rope_table(16, kHd, 10000.0);
  const int64_t n1 = 5, n2 = 7, width = kHeads * kHd;
  test::Guarded<float> packed(random_tokens(n1 + n2, 2));
  std::vector<float> first(packed.data(), packed.data() + n1 * width);
  std::vector<float> second(packed.data() + n1 * width, packed.data() + (n1 + n2) * width);
  std::vector<int64_t> pos{0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6};
  rope_forward_at(packed.data(), table, pos.data(), n1 + n2, kHeads);
  EXPECT_TRUE(packed.guards_intact());
  rope_forward(first.data(), table, 1, n1, kHeads);
  rope_forward(second.data(), table, 1, n2, kHeads);
  for (int64_t i = 0; i < n1 * width; ++i) EXPECT_EQ(packed[size_t(i)], first[size_t(i)]);
  for (int64_t i = 0; i < n2 * width; ++i) {
    EXPECT_EQ(packed[size_t(n1 * width + i)], second[size_t(i)]);
  }
}

// The backward is the transpose of the forward: <dy, R x> = <R^T dy, x>, at arbitrary
// positions (a context-parallel rank's two runs).
TEST(RopePositions, BackwardIsTheTransposeAtArbitraryPositions) {
  const RopeTable table = make_rope_table(64, kHd, 500.0);
  const std::vector<int64_t> pos{3, 4, 5, 40, 41, 42, 63};
  const int64_t n = static_cast<int64_t>(pos.size());
  const std::vector<float> x = random_tokens(n, 3), dy = random_tokens(n, 4);
  std::vector<float> rx = x, rdy = dy;
  rope_forward_at(rx.data(), table, pos.data(), n, kHeads);
  rope_backward_at(rdy.data(), table, pos.data(), n, kHeads);
  double lhs = 0, rhs = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    lhs += double(dy[i]) * rx[i];
    rhs += double(rdy[i]) * x[i];
  }
  EXPECT_NEAR(lhs, rhs, 1e-5);
  rope_backward_at(rx.data(), table, pos.data(), n, kHeads);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(rx[i], x[i], 1e-6);
}

}  // namespace
}  // namespace ms::ops
