// The config checks that need the world size or the data: each refusal names the key and rule.
#include "train/run_checks.h"

#include <gtest/gtest.h>

namespace ms::train {
namespace {

config::RunConfig base() {
  config::RunConfig c;
  c.train.global_batch = 8;
  c.train.micro_batch = 2;
  c.train.seq_len = 64;
  c.model.max_seq_len = 128;
  c.model.vocab_size = 1000;
  return c;
}

void expect_message(const Status& s, const std::string& text) {
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
}

TEST(RunChecks, DataParallelSizeIsTheWorldSize) {
  Result<int> dp = data_parallel_size(base(), 4);
  ASSERT_TRUE(dp.ok());
  EXPECT_EQ(*dp, 4);
}

TEST(RunChecks, GlobalBatchMustSplitOverTheActualRanks) {
  expect_message(data_parallel_size(base(), 3).status(),
                 "train.global_batch (8) must be divisible by data-parallel size * "
                 "train.micro_batch = 3 * 2 = 6");
}

TEST(RunChecks, LoaderRanksAreNotDataParallel) {
  config::RunConfig c = base();
  c.parallel.loaders = 1;
  Result<int> dp = data_parallel_size(c, 3);
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  EXPECT_EQ(*dp, 2);
  expect_message(data_parallel_size(c, 4).status(),
                 "train.global_batch (8) must be divisible by data-parallel size * "
                 "train.micro_batch = 3 * 2 = 6 (dp is the number of trainer ranks, 4 minus "
                 "parallel.loaders 1)");
}

TEST(RunChecks, LoadersMustLeaveATrainer) {
  config::RunConfig c = base();
  c.parallel.loaders = 2;
  expect_message(data_parallel_size(c, 2).status(),
                 "parallel.loaders (2) must leave at least one trainer rank: the job has 2");
  c.parallel.loaders = 1;
  expect_message(data_parallel_size(c, 1).status(), "parallel.loaders (1) must leave");
}

TEST(RunChecks, TensorParallelismDividesTheTrainers) {
  config::RunConfig c = base();
  c.parallel.tp = 2;
  Result<int> dp = data_parallel_size(c, 4);
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  EXPECT_EQ(*dp, 2);
  expect_message(data_parallel_size(c, 3).status(), "parallel.tp (2) must divide the 3 trainer");
  c.parallel.loaders = 1;
  dp = data_parallel_size(c, 5);
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  EXPECT_EQ(*dp, 2);
}

TEST(RunChecks, SequenceParallelismSplitsTheMicroBatchTokens) {
  config::RunConfig c = base();
  c.parallel.tp = 4;
  c.train.micro_batch = 1;
  c.train.global_batch = 2;
  c.train.seq_len = 6;
  expect_message(data_parallel_size(c, 8).status(),
                 "parallel.sequence_parallel splits each micro-batch's tokens");
  c.parallel.sequence_parallel = false;
  EXPECT_TRUE(data_parallel_size(c, 8).ok());
}

TEST(RunChecks, ExpertParallelismIsCarvedOutOfDataParallelism) {
  config::RunConfig c = base();
  c.parallel.ep = 2;
  expect_message(data_parallel_size(c, 2).status(), "model.moe.num_experts (0) must be a "
                                                     "positive multiple of parallel.ep (2)");
  c.model.moe.num_experts = 4;
  Result<int> dp = data_parallel_size(c, 2);
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  EXPECT_EQ(*dp, 2);
  c.parallel.ep = 3;
  c.model.moe.num_experts = 3;
  expect_message(data_parallel_size(c, 2).status(),
                 "parallel.ep (3) must divide the data-parallel size 2");
}

TEST(RunChecks, PipelineStagesComeOutOfTheRanks) {
  config::RunConfig c = base();
  c.model.n_layers = 4;
  c.parallel.pp = 2;
  Result<int> dp = data_parallel_size(c, 4);
  ASSERT_TRUE(dp.ok()) << dp.status().to_string();
  EXPECT_EQ(*dp, 2);
  expect_message(data_parallel_size(c, 3).status(),
                 "parallel.pp * parallel.tp = 2 * 1 must divide the 3 trainer rank(s)");
  Result<PipelineLayout> layout = check_pipeline(c, 2);
  ASSERT_TRUE(layout.ok()) << layout.status().to_string();
  EXPECT_EQ(layout->schedule.micro_batches, 2);  // 8 / (dp 2 x micro-batch 2)
  ASSERT_EQ(layout->stages.size(), 2u);
  EXPECT_EQ(layout->stages[1].first, 2);
}

TEST(RunChecks, PipelineSplitsAndSchedulesThatDoNotFitAreRefused) {
  config::RunConfig c = base();
  c.model.n_layers = 4;
  c.parallel.pp = 3;
  expect_message(data_parallel_size(c, 3).status(), "parallel.pp_layers");
  c.parallel.pp = 2;
  c.parallel.pp_layers = {3, 2};
  expect_message(data_parallel_size(c, 2).status(), "parallel.pp_layers");
  c.parallel.pp_layers = {};
  c.parallel.schedule = "interleaved";
  expect_message(data_parallel_size(c, 2).status(), "parallel.schedule interleaved");
  c.parallel.vpp = 2;
  c.train.global_batch = 6;  // 3 micro-batches: not a multiple of pp
  expect_message(data_parallel_size(c, 2).status(), "3 micro-batches per step");
}

TEST(RunChecks, SequenceLengthMustMatchThePlan) {
  expect_message(check_against_data(base(), {"mix.plan", 32, 500}),
                 "train.seq_len (64) must equal the sequence length of the plan mix.plan (32)");
}

TEST(RunChecks, PlanSequenceMustFitTheModel) {
  config::RunConfig c = base();
  c.model.max_seq_len = 32;
  expect_message(check_against_data(c, {"mix.plan", 64, 500}), "model.max_seq_len (32)");
}

TEST(RunChecks, VocabularyMustCoverTheTokenizer) {
  expect_message(check_against_data(base(), {"mix.plan", 64, 50257}),
                 "model.vocab_size (1000) is smaller than the vocabulary of the dataset's "
                 "tokenizer (50257");
  EXPECT_TRUE(check_against_data(base(), {"mix.plan", 64, 0}).ok());  // unknown vocabulary
  EXPECT_TRUE(check_against_data(base(), {"mix.plan", 64, 1000}).ok());
}

TEST(RunChecks, PlanMustBeGivenAndExist) {
  config::RunConfig c = base();
  c.data.plan.clear();
  expect_message(check_plan_path(c), "data.plan is not set");
  c.data.plan = "/nonexistent/mix.plan";
  const Status missing = check_plan_path(c);
  EXPECT_EQ(missing.code(), StatusCode::kNotFound);
  expect_message(missing, "no plan file at /nonexistent/mix.plan");
}

}  // namespace
}  // namespace ms::train
