// The bit allocator (infer/bit_allocation.h) on hand-made cost tables: its assignment is the
// least-error one within the budget, checked against brute force over every assignment of
// small random tables; the rounded (inexact) mode still fits the budget; a budget below the
// smallest assignment is refused naming it; and the sizes, labels and byte-size parsing.
#include "infer/bit_allocation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/philox.h"
#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::take;

AllocationChoice choice(int64_t bytes, double error) {
  return {{ops::WeightFormat::kInt8, 0}, bytes, error};
}

// The least error over every assignment within the budget (infinity when none fits).
double brute_force(const std::vector<AllocationItem>& items, int64_t budget) {
  double best = std::numeric_limits<double>::infinity();
  std::vector<size_t> pick(items.size(), 0);
  while (true) {
    int64_t bytes = 0;
    double error = 0;
    for (size_t k = 0; k < items.size(); ++k) {
      bytes += items[k].choices[pick[k]].bytes;
      error += items[k].choices[pick[k]].error;
    }
    if (bytes <= budget) best = std::min(best, error);
    size_t k = 0;
    while (k < items.size() && ++pick[k] == items[k].choices.size()) pick[k++] = 0;
    if (k == items.size()) return best;
  }
}

std::vector<AllocationItem> random_items(uint64_t seed, size_t n, size_t k) {
  std::vector<AllocationItem> items;
  for (size_t i = 0; i < n; ++i) {
    AllocationItem item{"t" + std::to_string(i), {}};
    for (size_t j = 0; j < k; ++j) {
      const auto r = [&](uint64_t salt) { return uniform(seed, i * 16 + j, salt); };
      item.choices.push_back(choice(1 + static_cast<int64_t>(r(1) * 40), r(2)));
    }
    items.push_back(item);
  }
  return items;
}

TEST(BitAllocationTest, MatchesBruteForceOnRandomTables) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    const std::vector<AllocationItem> items = random_items(seed, 2 + seed % 4, 2 + seed % 3);
    const int64_t lo = minimum_bytes(items);
    for (int64_t budget = lo; budget <= lo + 60; budget += 7) {
      const Allocation a = take(allocate_bits(items, budget));
      EXPECT_TRUE(a.exact);
      EXPECT_LE(a.bytes, budget);
      EXPECT_NEAR(a.error, brute_force(items, budget), 1e-12)
          << "seed " << seed << " budget " << budget;
      int64_t bytes = 0;
      double error = 0;
      for (size_t k = 0; k < items.size(); ++k) {
        bytes += items[k].choices[a.choice[k]].bytes;
        error += items[k].choices[a.choice[k]].error;
      }
      EXPECT_EQ(bytes, a.bytes);
      EXPECT_DOUBLE_EQ(error, a.error);
    }
  }
}

// Three tensors where the budget buys either a's upgrade or both b's and c's: the two cost
// the same bytes, and b's and c's together remove more error.
TEST(BitAllocationTest, PicksTheOptimumOfAHandMadeTable) {
  const std::vector<AllocationItem> items = {
      {"a", {choice(10, 5.0), choice(30, 0.0)}},
      {"b", {choice(10, 3.0), choice(20, 0.4)}},
      {"c", {choice(10, 3.0), choice(20, 0.4)}},
  };
  const Allocation a = take(allocate_bits(items, 50));
  EXPECT_EQ(a.choice, (std::vector<size_t>{0, 1, 1}));  // 5 + 0.4 + 0.4 < 0 + 3 + 3
  EXPECT_DOUBLE_EQ(a.error, 5.8);
  EXPECT_EQ(a.bytes, 50);
  const Allocation roomy = take(allocate_bits(items, 70));
  EXPECT_EQ(roomy.choice, (std::vector<size_t>{1, 1, 1}));
  EXPECT_EQ(roomy.bytes, 70);
  const Allocation tight = take(allocate_bits(items, 30));
  EXPECT_EQ(tight.choice, (std::vector<size_t>{0, 0, 0}));
}

TEST(BitAllocationTest, TiesKeepTheSmallerFormat) {
  const std::vector<AllocationItem> items = {{"a", {choice(40, 0.0), choice(10, 0.0)}}};
  const Allocation a = take(allocate_bits(items, 100));
  EXPECT_EQ(a.choice[0], 1u);
  EXPECT_EQ(a.bytes, 10);
}

TEST(BitAllocationTest, RoundedSizesStillFitTheBudget) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    const std::vector<AllocationItem> items = random_items(100 + seed, 5, 4);
    const int64_t budget = minimum_bytes(items) + 53;
    const Allocation a = take(allocate_bits(items, budget, /*max_cells=*/8));
    EXPECT_FALSE(a.exact);
    EXPECT_GT(a.unit, 1);
    EXPECT_LE(a.bytes, budget);
    EXPECT_GE(a.error, brute_force(items, budget) - 1e-12);
  }
}

TEST(BitAllocationTest, RefusesABudgetBelowTheSmallestAssignment) {
  const std::vector<AllocationItem> items = {{"a", {choice(1500000, 1), choice(3000000, 0)}},
                                             {"b", {choice(500000, 1)}}};
  const Result<Allocation> r = allocate_bits(items, 1999999);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("smallest assignment, 2.00 MB (2000000 bytes)"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(allocate_bits(items, 2000000).ok());
  EXPECT_FALSE(allocate_bits({{"empty", {}}}, 10).ok());
  EXPECT_FALSE(allocate_bits({{"negative", {choice(10, -1)}}}, 10).ok());
}

TEST(BitAllocationTest, CandidateFormatsAndTheirBytes) {
  const std::vector<AllocationChoice> c = candidate_formats(8, 64);  // 64: groups of 128 do not fit
  std::vector<std::string> labels;
  for (const AllocationChoice& x : c) labels.push_back(format_label(x.format));
  EXPECT_EQ(labels, (std::vector<std::string>{"f32", "bf16", "int8", "int4-g64", "int4-g32"}));
  EXPECT_EQ(c[0].bytes, 8 * 64 * 4);
  EXPECT_EQ(c[1].bytes, 8 * 64 * 2);
  EXPECT_EQ(c[2].bytes, 8 * 64 + 8 * 4);
  EXPECT_EQ(c[3].bytes, 8 * 32 + 8 * 1 * 4);
  EXPECT_EQ(c[4].bytes, 8 * 32 + 8 * 2 * 4);
  const std::vector<AllocationItem> items = {{"a", c}};
  EXPECT_EQ(take(uniform_allocation(items, {ops::WeightFormat::kInt4, 32})).bytes, c[4].bytes);
  const Result<Allocation> none = uniform_allocation(items, {ops::WeightFormat::kInt4, 128});
  EXPECT_NE(none.status().message().find("tensor a cannot be stored in int4-g128"),
            std::string::npos);
}

TEST(BitAllocationTest, ParsesByteSizes) {
  EXPECT_EQ(take(parse_byte_size("2GB")), 2000000000);
  EXPECT_EQ(take(parse_byte_size("512MB")), 512000000);
  EXPECT_EQ(take(parse_byte_size("1.5GiB")), 1610612736);
  EXPECT_EQ(take(parse_byte_size("300000")), 300000);
  EXPECT_EQ(take(parse_byte_size("64kib")), 65536);
  for (const char* bad : {"", "GB", "2TB", "-1MB", "0", "1.5.2MB"}) {
    const Result<int64_t> r = parse_byte_size(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("\"" + std::string(bad) + "\""), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace ms::infer
