// The Loader as ms-train uses it: inputs and targets shifted by one; each data-parallel rank
// takes its contiguous block of every global batch, so the global batches are the same for any
// dp size; state() after k steps and restore() in a new loader continue exactly as an
// uninterrupted run; the train split wraps around into another epoch over the plan.
#include "data/loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "data/plan.h"
#include "plan_fixtures.h"

namespace ms::data {
namespace {

using ::testing::HasSubstr;
using testing::PlanDir;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::plan_or_fail(testing::two_source_mixture(dir_, 96), plan_path());
  }
  std::string plan_path() const { return dir_.file("mix.plan"); }

  LoaderOptions options(int dp_rank, int dp_size, int prefetch = 2) const {
    LoaderOptions o;
    o.plan_path = plan_path();
    o.global_batch = 8;
    o.micro_batch = 2;
    o.dp_rank = dp_rank;
    o.dp_size = dp_size;
    o.prefetch = prefetch;
    return o;
  }

  std::unique_ptr<Loader> open(const LoaderOptions& o) {
    auto loader = Loader::open(o);
    EXPECT_TRUE(loader.ok()) << loader.status().to_string();
    return loader.ok() ? std::move(loader).value() : nullptr;
  }

  // The rows (inputs) of `steps` global batches as seen through `dp_size` ranks, concatenated
  // in rank order within each step.
  std::vector<std::vector<int32_t>> global_batches(int dp_size, int steps) {
    std::vector<std::vector<int32_t>> batches(steps);
    for (int r = 0; r < dp_size; ++r) {
      auto loader = open(options(r, dp_size));
      for (int step = 0; step < steps; ++step) {
        for (int m = 0; m < loader->micro_batches_per_step(); ++m) {
          Result<MicroBatch> b = loader->next();
          EXPECT_TRUE(b.ok());
          EXPECT_EQ(b->step, step);
          EXPECT_EQ(b->micro_index, m);
          batches[step].insert(batches[step].end(), b->inputs.begin(), b->inputs.end());
        }
      }
    }
    return batches;
  }

  PlanDir dir_;
};

TEST_F(LoaderTest, TargetsAreInputsShiftedByOne) {
  auto loader = open(options(0, 1));
  EXPECT_EQ(loader->seq_len(), 16);
  EXPECT_EQ(loader->vocab_size(), 50257);
  EXPECT_EQ(loader->tokenizer_path(), "tok/tokenizer.json");
  EXPECT_EQ(loader->micro_batches_per_step(), 4);
  EXPECT_EQ(loader->samples_in_split(), 96);
  Result<MicroBatch> b = loader->next();
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(b->rows, 2);
  ASSERT_EQ(b->inputs.size(), 32u);
  for (int row = 0; row < 2; ++row) {
    for (int t = 0; t + 1 < 16; ++t) EXPECT_EQ(b->targets[row * 16 + t], b->inputs[row * 16 + t + 1]);
  }
}

TEST_F(LoaderTest, RowsFollowThePlanOrder) {
  auto plan = Plan::open(plan_path());
  ASSERT_TRUE(plan.ok());
  auto loader = open(options(0, 1));
  for (int64_t g = 0; g < 16; g += 2) {
    Result<MicroBatch> b = loader->next();
    ASSERT_TRUE(b.ok());
    for (int row = 0; row < 2; ++row) {
      const SampleRef ref = (*plan)->sample(Split::kTrain, g + row);
      EXPECT_EQ(testing::tag_of(b->inputs[row * 16]), static_cast<int>(ref.source) + 1);
    }
  }
}

TEST_F(LoaderTest, GlobalBatchesAreTheSameForEveryDataParallelSize) {
  const auto one = global_batches(1, 5);
  EXPECT_EQ(global_batches(2, 5), one);
  EXPECT_EQ(global_batches(4, 5), one);
}

TEST_F(LoaderTest, RestoreContinuesExactlyLikeAnUninterruptedRun) {
  auto uninterrupted = open(options(1, 2));
  auto first = open(options(1, 2));
  const int per_step = first->micro_batches_per_step();
  for (int i = 0; i < 3 * per_step + 1; ++i) {  // three steps and one micro-batch of the fourth
    ASSERT_TRUE(first->next().ok());
  }
  const LoaderState state = first->state();
  EXPECT_EQ(state.consumed_samples, 24);  // the step boundary before the partial step
  EXPECT_EQ(state.plan_hash, first->plan_hash());

  auto resumed = open(options(1, 2, /*prefetch=*/0));
  ASSERT_TRUE(resumed->restore(state).ok());
  for (int i = 0; i < 3 * per_step; ++i) ASSERT_TRUE(uninterrupted->next().ok());
  for (int i = 0; i < 20; ++i) {
    Result<MicroBatch> a = uninterrupted->next();
    Result<MicroBatch> b = resumed->next();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->step, b->step);
    EXPECT_EQ(a->inputs, b->inputs) << "micro-batch " << i << " after resume";
  }
}

TEST_F(LoaderTest, TrainSplitWrapsAroundIntoAnotherEpoch) {
  auto loader = open(options(0, 1));
  std::vector<std::vector<int32_t>> first_pass;
  for (int i = 0; i < 48; ++i) first_pass.push_back(loader->next()->inputs);  // 96 samples
  for (int i = 0; i < 4; ++i) EXPECT_EQ(loader->next()->inputs, first_pass[i]);
  EXPECT_EQ(loader->state().consumed_samples, 104);
}

TEST_F(LoaderTest, ResetGoesBackToTheFirstSample) {
  auto loader = open(options(0, 1));
  const std::vector<int32_t> first = loader->next()->inputs;
  ASSERT_TRUE(loader->next().ok());
  loader->reset();
  EXPECT_EQ(loader->state().consumed_samples, 0);
  EXPECT_EQ(loader->next()->inputs, first);
}

TEST_F(LoaderTest, ValidationSplitReadsHeldOutDocuments) {
  LoaderOptions o = options(0, 1);
  o.split = Split::kValidation;
  o.global_batch = 4;
  auto loader = open(o);
  EXPECT_EQ(loader->samples_in_split(), 24);
  EXPECT_TRUE(loader->next().ok());
}

TEST_F(LoaderTest, RestoreRefusesAnotherPlansState) {
  auto loader = open(options(0, 1));
  Status s = loader->restore(LoaderState{"0123456789abcdef", 8});
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("0123456789abcdef"));
  s = loader->restore(LoaderState{loader->plan_hash(), 5});
  EXPECT_THAT(s.message(), HasSubstr("not a multiple of global_batch"));
}

TEST_F(LoaderTest, RefusesBatchesThatDoNotDivide) {
  LoaderOptions o = options(0, 3);
  auto loader = Loader::open(o);
  ASSERT_FALSE(loader.ok());
  EXPECT_THAT(loader.status().message(), HasSubstr("divisible by dp_size * micro_batch"));
  o = options(2, 2);
  EXPECT_THAT(Loader::open(o).status().message(), HasSubstr("dp_rank 2"));
}

TEST_F(LoaderTest, SplitNames) {
  EXPECT_EQ(*parse_split("train"), Split::kTrain);
  EXPECT_EQ(*parse_split("validation"), Split::kValidation);
  EXPECT_FALSE(parse_split("test").ok());
}

}  // namespace
}  // namespace ms::data
