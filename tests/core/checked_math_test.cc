// The overflow-checked size helpers every file reader uses: exact results inside the limits,
// and refusals naming the number and the dimension at every edge (negative, above 2^62, a
// product or sum that overflows 64 bits).
#include "core/checked_math.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace ms {
namespace {

bool has(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}

TEST(CheckedMath, CountsAndBytesInsideTheLimits) {
  EXPECT_EQ(*checked_numel(std::vector<int64_t>{}, "s"), 1);
  EXPECT_EQ(*checked_numel(std::vector<int64_t>{2, 3, 4}, "s"), 24);
  EXPECT_EQ(*checked_numel(std::vector<int64_t>{5, 0, kMaxDimension}, "s"), 0);
  EXPECT_EQ(*checked_numel(std::vector<int64_t>{kMaxDimension}, "s"), kMaxDimension);
  EXPECT_EQ(*checked_nbytes(std::vector<int64_t>{3, 5}, 4, "s"), 60u);
  EXPECT_EQ(*checked_add(kMaxDimension, kMaxDimension - 1, "s"),
            std::numeric_limits<int64_t>::max());
  EXPECT_FALSE(checked_add(kMaxDimension, kMaxDimension, "s").ok());
  EXPECT_EQ(*checked_end(10, 20, "s"), 30u);
  EXPECT_EQ(*checked_mul(1 << 20, 1 << 20, "s"), int64_t{1} << 40);
}

// [3, 6148914691236517206] has 2 elements modulo 2^64; it must be refused, not wrapped.
TEST(CheckedMath, WrappingShapesAreRefusedByName) {
  Result<int64_t> n = checked_numel(std::vector<int64_t>{3, 6148914691236517206}, "tensor 'x'");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(has(n.status(), "tensor 'x' [3, 6148914691236517206]: dimension 1 is "
                              "6148914691236517206, above the limit 2^62")) << n.status().message();
  n = checked_numel(std::vector<int64_t>{1 << 21, 1 << 21, 1 << 21}, "t");
  EXPECT_TRUE(has(n.status(), "the element count overflows 64 bits")) << n.status().message();
  n = checked_numel(std::vector<int64_t>{4, -1}, "t");
  EXPECT_TRUE(has(n.status(), "dimension 1 is negative"));
  // 2^61 elements fit, but not at 8 bytes each.
  Result<uint64_t> b = checked_nbytes(std::vector<int64_t>{int64_t{1} << 61}, 8, "t");
  EXPECT_TRUE(has(b.status(), "the byte count overflows 64 bits")) << b.status().message();
}

TEST(CheckedMath, SumsAndProductsOverflowingOrNegativeAreRefused) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(has(checked_add(max, 1, "box end").status(), "box end: 9223372036854775807 + 1"));
  EXPECT_FALSE(checked_add(-1, 5, "x").ok());
  EXPECT_FALSE(checked_mul(max, 2, "x").ok());
  EXPECT_FALSE(checked_mul(-3, 2, "x").ok());
  EXPECT_TRUE(has(checked_end(std::numeric_limits<uint64_t>::max() - 2, 3, "range").status(),
                  "range: offset 18446744073709551613 + length 3 overflows 64 bits"));
}

}  // namespace
}  // namespace ms
