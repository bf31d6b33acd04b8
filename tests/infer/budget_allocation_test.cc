// Choosing formats under a memory budget (infer/budget_allocation.h) on a tiny model: the bytes
// no assignment changes, the refusal of a budget below the smallest assignment, the assignment
// an allocation stands for, and the comparison rows (the chosen one, then each uniform format,
// each with a measured KL that is zero only for f32).
#include "infer/budget_allocation.h"

#include <gtest/gtest.h>

#include "tests/infer/test_models.h"

namespace ms::infer {
namespace {

using testing::take;

config::ModelConfig untied_model() {
  config::ModelConfig c = testing::tiny_dense();
  c.tie_embeddings = false;
  c.d_ff = 64;
  return c;
}

TEST(BudgetAllocationTest, FixedBytesAreEveryWeightButTheLinearOnes) {
  auto m = take(model::Transformer::create(untied_model(), 3));
  int64_t all = 0, linear = 0;
  for (const model::Parameter& p : m->parameters()) all += static_cast<int64_t>(p.value.nbytes());
  for (size_t i : m->cached_linear_parameters()) {
    linear += static_cast<int64_t>(m->parameters()[i].value.nbytes());
  }
  EXPECT_EQ(fixed_weight_bytes(*m), all - linear);
  const std::vector<AllocationItem> sizes = linear_weight_sizes(*m);
  ASSERT_EQ(sizes.size(), m->cached_linear_parameters().size());
  EXPECT_EQ(sizes[0].name, m->parameters()[m->cached_linear_parameters()[0]].name);
  EXPECT_EQ(sizes[0].choices[0].format.format, ops::WeightFormat::kF32);
}

TEST(BudgetAllocationTest, ABudgetBelowTheSmallestAssignmentIsRefusedNamingIt) {
  auto m = take(model::Transformer::create(untied_model(), 3));
  const int64_t minimum = fixed_weight_bytes(*m) + minimum_bytes(linear_weight_sizes(*m));
  EXPECT_TRUE(check_budget_fits(*m, minimum, "--memory-budget x").ok());
  const Status refused = check_budget_fits(*m, minimum - 1, "--memory-budget x");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.message().rfind("--memory-budget x (" + std::to_string(minimum - 1) +
                                        " bytes) is below the smallest assignment, ",
                                    0),
            0u)
      << refused.message();
  EXPECT_NE(refused.message().find("(" + std::to_string(minimum) + " bytes: "),
            std::string::npos)
      << refused.message();
}

TEST(BudgetAllocationTest, TheAssignmentNamesEachItemsChosenFormat) {
  std::vector<AllocationItem> items = {
      {"a", {{{ops::WeightFormat::kF32, 0}, 8, 0}, {{ops::WeightFormat::kInt8, 0}, 2, 1}}},
      {"b", {{{ops::WeightFormat::kF32, 0}, 8, 0}, {{ops::WeightFormat::kInt4, 32}, 1, 2}}}};
  Allocation a;
  a.choice = {1, 0};
  const FormatAssignment f = assignment_of(items, a);
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f.at("a").format, ops::WeightFormat::kInt8);
  EXPECT_EQ(f.at("b").format, ops::WeightFormat::kF32);
}

TEST(BudgetAllocationTest, ComparesTheChosenAssignmentWithEachUniformFormat) {
  auto m = take(model::Transformer::create(untied_model(), 3));
  TokenWindows windows;
  windows.seq_len = 8;
  for (int i = 0; i < 2 * 9; ++i) windows.tokens.push_back((7 * i + 1) % 96);
  const KlReference ref = take(KlReference::create(*m, windows));
  std::vector<AllocationItem> items = linear_weight_sizes(*m);
  Allocation f32;  // every weight in its first choice, f32
  f32.choice.assign(items.size(), 0);
  const auto rows = take(compare_assignments(*m, ref, items, f32, "budget all"));
  ASSERT_EQ(rows.size(), 1 + uniform_formats().size());
  EXPECT_EQ(rows[0].name, "budget all");
  EXPECT_NEAR(rows[0].measured_kl, 0.0, 1e-9);
  EXPECT_EQ(rows[1].name, "uniform bf16");
  EXPECT_EQ(rows[2].name, "uniform int8");
  ASSERT_TRUE(rows[2].allocation.ok());
  EXPECT_GT(rows[2].measured_kl, 0.0);
  EXPECT_EQ(rows[5].name, "uniform int4-g32");
}

}  // namespace
}  // namespace ms::infer
