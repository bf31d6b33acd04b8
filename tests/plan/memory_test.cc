// The planner's memory split against the trainer's own figures: the dry run's per-rank line
// (train/layout_report.h) for weights, gradients and optimizer state, and the model's
// activation_bytes for activations.
#include "plan/memory.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "model/transformer.h"
#include "parallel/tp_layout.h"
#include "train/layer_shape.h"
#include "train/layout_report.h"

namespace ms::plan {
namespace {

config::RunConfig small_model() {
  config::RunConfig c;
  c.model.vocab_size = 1000;
  c.model.d_model = 64;
  c.model.n_layers = 4;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.d_ff = 176;
  c.model.max_seq_len = 128;
  c.train.seq_len = 64;
  c.train.global_batch = 8;
  c.train.micro_batch = 2;
  return c;
}

// The "# per model rank (...): weights W MiB, gradients G MiB, optimizer state O MiB" line.
void dry_run_memory(const config::RunConfig& c, int world, double out[3]) {
  Result<std::string> text = train::describe_layout(c, world);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const size_t at = text->find("# per model rank");
  ASSERT_NE(at, std::string::npos);
  const size_t colon = text->find("): ", at);
  ASSERT_EQ(std::sscanf(text->c_str() + colon,
                        "): weights %lf MiB, gradients %lf MiB, optimizer state %lf MiB", &out[0],
                        &out[1], &out[2]),
            3)
      << text->substr(at);
}

void expect_matches_dry_run(const config::RunConfig& c, const Layout& l, int world) {
  const config::RunConfig applied = apply_layout(c, l);
  double dry[3];
  dry_run_memory(applied, world, dry);
  Result<std::vector<RankElements>> e = rank_elements(c, l);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  Result<std::vector<RankMemory>> m = rank_memory(c, l, *e, 4, 0);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // The dry run prints pipeline rank 0 with one decimal; under ZeRO-1 the planner adds the
  // optimizer's reduced gradient shard (1/dp of the gradients), which the dry run leaves out.
  EXPECT_NEAR((*m)[0].weights_mib, dry[0], 0.051) << layout_name(l);
  EXPECT_NEAR((*m)[0].gradients_mib, dry[1] * (l.zero ? 1.0 + 1.0 / l.dp : 1.0), 0.11)
      << layout_name(l);
  EXPECT_NEAR((*m)[0].optimizer_mib, dry[2], 0.051) << layout_name(l);
}

TEST(Memory, MatchesTheDryRunAcrossLayouts) {
  config::RunConfig c = small_model();
  c.model.vocab_size = 50000;  // large enough that one decimal of MiB tells layouts apart
  expect_matches_dry_run(c, {.dp = 4, .micro_batch = 2}, 4);
  expect_matches_dry_run(c, {.dp = 4, .micro_batch = 2, .zero = false}, 4);
  expect_matches_dry_run(c, {.dp = 2, .tp = 2, .micro_batch = 2}, 4);
  expect_matches_dry_run(c, {.dp = 1, .tp = 2, .pp = 2, .micro_batch = 2}, 4);
  expect_matches_dry_run(
      c, {.dp = 1, .pp = 2, .vpp = 2, .schedule = "interleaved", .micro_batch = 2}, 2);
}

TEST(Memory, ActivationsAreTheModelsFigureTimesMicroBatchesInFlight) {
  config::RunConfig c = small_model();
  const Layout one{.dp = 1, .micro_batch = 2};
  Result<std::unique_ptr<model::Transformer>> model = model::Transformer::create(c.model, 1);
  ASSERT_TRUE(model.ok());
  const double expected =
      static_cast<double>((*model)->activation_bytes(2, 64)) / (1024.0 * 1024.0);
  Result<std::vector<RankElements>> e = rank_elements(c, one);
  ASSERT_TRUE(e.ok());
  Result<std::vector<RankMemory>> m = rank_memory(c, one, *e, 4, 0);
  ASSERT_TRUE(m.ok());
  EXPECT_NEAR((*m)[0].activations_mib, expected, 1e-9);
  EXPECT_EQ((*m)[0].dense_elements, (*model)->parameter_count());
  // Full recomputation keeps less; a 1f1b pipeline's first rank holds pp micro-batches.
  Result<std::vector<RankMemory>> full =
      rank_memory(c, {.dp = 1, .micro_batch = 2, .recompute = config::Recompute::kFull}, *e, 4, 0);
  ASSERT_TRUE(full.ok());
  EXPECT_LT((*full)[0].activations_mib, (*m)[0].activations_mib);
  const Layout pipe{.dp = 1, .pp = 2, .micro_batch = 2};
  Result<std::vector<RankElements>> pe = rank_elements(c, pipe);
  ASSERT_TRUE(pe.ok());
  Result<std::vector<RankMemory>> pm = rank_memory(c, pipe, *pe, 4, 0);
  ASSERT_TRUE(pm.ok());
  ASSERT_EQ(pm->size(), 2u);
  EXPECT_GT((*pm)[0].activations_mib, (*pm)[1].activations_mib * 0.5);
}

TEST(Memory, ExpertParallelismSplitsTheExperts) {
  config::RunConfig c = small_model();
  c.model.moe.num_experts = 4;
  c.model.moe.top_k = 2;
  Result<std::vector<RankElements>> whole = rank_elements(c, {.dp = 2, .micro_batch = 2});
  Result<std::vector<RankElements>> split = rank_elements(c, {.dp = 2, .ep = 2, .micro_batch = 2});
  ASSERT_TRUE(whole.ok() && split.ok());
  EXPECT_EQ((*split)[0].dense, (*whole)[0].dense);
  EXPECT_EQ((*split)[0].expert * 2, (*whole)[0].expert);
  EXPECT_GT((*whole)[0].expert, 0);
}

TEST(Memory, MixedPrecisionHalvesWeightsAndActivations) {
  config::RunConfig c = small_model();
  const Layout l{.dp = 2, .micro_batch = 2, .zero = false};
  Result<std::vector<RankElements>> e = rank_elements(c, l);
  ASSERT_TRUE(e.ok());
  Result<std::vector<RankMemory>> f32 = rank_memory(c, l, *e, 4, 0);
  Result<std::vector<RankMemory>> bf16 = rank_memory(c, l, *e, 2, 0);
  ASSERT_TRUE(f32.ok() && bf16.ok());
  EXPECT_NEAR((*bf16)[0].weights_mib * 2, (*f32)[0].weights_mib, 1e-9);
  EXPECT_NEAR((*bf16)[0].activations_mib * 2, (*f32)[0].activations_mib, 1e-9);
  EXPECT_NEAR((*bf16)[0].gradients_mib, (*f32)[0].gradients_mib, 1e-9);

  // The f32 master copy joins the moments.
  EXPECT_NEAR((*bf16)[0].optimizer_mib, (*f32)[0].optimizer_mib * 1.5, 1e-9);
}

// At bf16 each backend keeps copies of the matmul-class calls' operands: per slot, the largest
// call's. small_model at micro-batch 2 x 64 tokens (N 128): the MLP's x (128 x 176), the LM head's
// w (V x 64) and dy (128 x V) and attention's dout (q, 128 x 64) on the host, in f32; on a device
// x, w and dy in bf16 and q, k, v, dout in f32, each up to twice (grown by doubling). Measured on
// the host: tiny-dense trained 6 steps in f32 and bf16 peaked 110.8 MiB apart, this figure 110.9
// (docs/train.md).
TEST(Memory, Bf16OperandCopiesAreTheLargestCallPerSlot) {
  config::RunConfig c = apply_layout(small_model(), {.dp = 1, .micro_batch = 2});
  EXPECT_EQ(train::bf16_scratch_bytes(c, false, true), 0.0);  // f32: no copies
  c.train.precision = config::Precision::kBf16;
  const double v = static_cast<double>(parallel::padded_vocab(c.model.vocab_size, 1));
  const double x = 128 * 176, q = 128 * 64, kv = 128 * 32;
  EXPECT_DOUBLE_EQ(train::bf16_scratch_bytes(c, false, true), 4 * (x + 64 * v + 128 * v + q));
  // Off the last pipeline rank the LM head's operands are not there: the MLP's are the largest.
  EXPECT_DOUBLE_EQ(train::bf16_scratch_bytes(c, false, false),
                   4 * (x + 176 * 64 + 128 * 176 + q));
  EXPECT_DOUBLE_EQ(train::bf16_scratch_bytes(c, true, true),
                   2 * (2 * (x + 64 * v + 128 * v) + 4 * (q + kv + kv + q)));
  // Tensor parallelism shards the LM head, so its copies shrink.
  config::RunConfig tp2 = c;
  tp2.parallel.tp = 2;
  EXPECT_LT(train::bf16_scratch_bytes(tp2, false, true), train::bf16_scratch_bytes(c, false, true));
}

TEST(Memory, ZeroBubbleKeepsTheDeferredWeightGradientOperands) {
  config::RunConfig c = small_model();
  const Layout one{.dp = 1, .pp = 2, .schedule = "1f1b", .micro_batch = 2};
  Layout zb = one;
  zb.schedule = "zero-bubble";
  Result<std::vector<RankElements>> e = rank_elements(c, one);
  ASSERT_TRUE(e.ok());
  Result<std::vector<RankMemory>> a = rank_memory(c, one, *e, 4, 0);
  Result<std::vector<RankMemory>> b = rank_memory(c, zb, *e, 4, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT((*b)[0].activations_mib, (*a)[0].activations_mib);
  EXPECT_DOUBLE_EQ((*b)[0].weights_mib, (*a)[0].weights_mib);
}

// The schedule holds weight passes back to fill its bubbles, so with more micro-batches more of
// them wait at once, each holding its operands, while 1F1B's activations stay at the stages in
// flight. (Measured: a pp 2 zero-bubble run with 16 micro-batches peaked at 325 MiB against 197
// MiB for 1F1B with 8; docs/benchmarks.md, the held-out layouts.)
TEST(Memory, ZeroBubbleCountsTheWeightPassesTheScheduleHoldsBack) {
  auto activations = [](const std::string& schedule, int64_t micro_batch) {
    config::RunConfig c = small_model();
    const Layout l{.dp = 1, .pp = 2, .schedule = schedule, .micro_batch = micro_batch};
    Result<std::vector<RankElements>> e = rank_elements(c, l);
    EXPECT_TRUE(e.ok());
    Result<std::vector<RankMemory>> m = rank_memory(c, l, *e, 4, 0);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    return (*m)[0].activations_mib / static_cast<double>(micro_batch);  // per sample
  };
  // 16 micro-batches of 1 against 4 of 4: per sample, 1F1B keeps the same (pp in flight at
  // most), zero-bubble more.
  EXPECT_NEAR(activations("1f1b", 1), activations("1f1b", 4), 1e-9);
  EXPECT_GT(activations("zero-bubble", 1), activations("zero-bubble", 4) * 1.5);
}

}  // namespace
}  // namespace ms::plan
