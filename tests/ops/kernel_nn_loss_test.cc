// The embedding and loss kernels (kernels/embedding_loss.cuh) against their CPU twins in
// lib/ops, and the host grouping behind the deterministic embedding backward
// (kernels/embedding_grouping.h, checked here on every machine). Device outputs sit between
// guard bands, accumulated tables start from non-zero values, and every kernel runs twice and
// must repeat its bits. Tolerances: gathers and the grouped backward are exact (the same adds
// in the same order as the CPU); losses and lse within 1e-6 * (1 + |cpu|) (double sums in
// another order, CUDA's expf and log against glibc's); gradients within 4e-6 * (|cpu| +
// |grad_scale|), which covers exp's ulps and a log-sum-exp that rounds to the neighbouring
// float. Without a GPU the twin tests skip with the reason; the argument checks run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/embedding_grouping.h"
#include "kernels/embedding_loss.cuh"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "tests/ops/device_twin.h"

namespace ms::kernels {
namespace {

using test::DeviceGuarded;
using test::expect_near_all;
using test::expect_same_bits;
using test::relative;
using test::succeeded;
using test::upload;

constexpr double kLossTolerance = 1e-6;
auto gradient_tolerance(float grad_scale) {
  return [grad_scale](double want) { return 4e-6 * (std::fabs(want) + std::fabs(grad_scale)); };
}

std::vector<float> random_floats(int64_t n, std::mt19937_64& rng, float lo = -4, float hi = 4) {
  return test::random_floats(static_cast<size_t>(n), rng, lo, hi);
}
std::vector<int32_t> random_ids(int64_t n, int32_t lo, int32_t hi, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> dist(lo, hi - 1);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& id : ids) id = dist(rng);
  return ids;
}

class LossKernelTest : public test::GpuTwinTest {};

// ---- The grouping (host code: runs everywhere) ----

TEST(EmbeddingGroupingTest, GroupsTokensByRowInIncreasingOrder) {
  const std::vector<int32_t> ids = {3, 1, 3, 0, 1, 3};
  const EmbeddingGrouping g = group_tokens_by_row(ids.data(), 6, 0, 4);
  EXPECT_EQ(g.rows, (std::vector<int32_t>{0, 1, 3}));
  EXPECT_EQ(g.starts, (std::vector<int64_t>{0, 1, 3, 6}));
  EXPECT_EQ(g.tokens, (std::vector<int64_t>{3, 1, 4, 0, 2, 5}));
  EXPECT_EQ(g.groups(), 3);
}

TEST(EmbeddingGroupingTest, RangeFormKeepsOnlyHeldIdsRelativeToFirst) {
  const std::vector<int32_t> ids = {3, 1, 3, 0, 1, 2, -5};
  const EmbeddingGrouping g = group_tokens_by_row(ids.data(), 7, 1, 2);  // ids 1 and 2
  EXPECT_EQ(g.rows, (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(g.starts, (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(g.tokens, (std::vector<int64_t>{1, 4, 5}));
}

TEST(EmbeddingGroupingTest, NothingHeldGivesNoGroupsAndOneStart) {
  const std::vector<int32_t> ids = {7, 8, -1};
  for (const EmbeddingGrouping& g :
       {group_tokens_by_row(ids.data(), 3, 0, 7), group_tokens_by_row(ids.data(), 0, 0, 100),
        group_tokens_by_row(nullptr, 0, 0, 0)}) {
    EXPECT_TRUE(g.rows.empty());
    EXPECT_TRUE(g.tokens.empty());
    EXPECT_EQ(g.starts, (std::vector<int64_t>{0}));
  }
}

// Against the definition on random ids: every held token exactly once, under its own row, rows
// strictly increasing, tokens increasing within a row.
TEST(EmbeddingGroupingTest, MatchesTheDefinitionOnRandomIds) {
  std::mt19937_64 rng(11);
  const int64_t n = 5000, first = 7, count = 40;
  const std::vector<int32_t> ids = random_ids(n, -3, 60, rng);
  const EmbeddingGrouping g = group_tokens_by_row(ids.data(), n, first, count);
  ASSERT_EQ(g.starts.size(), g.rows.size() + 1);
  EXPECT_EQ(g.starts.front(), 0);
  EXPECT_EQ(g.starts.back(), static_cast<int64_t>(g.tokens.size()));
  std::vector<int64_t> expected_tokens;
  for (int64_t row = 0; row < count; ++row) {
    for (int64_t i = 0; i < n; ++i) {
      if (ids[static_cast<size_t>(i)] - first == row) expected_tokens.push_back(i);
    }
  }
  EXPECT_EQ(g.tokens, expected_tokens);  // row by row, increasing within each
  for (size_t k = 0; k < g.rows.size(); ++k) {
    if (k > 0) {
      EXPECT_LT(g.rows[k - 1], g.rows[k]);
    }
    EXPECT_LT(g.starts[k], g.starts[k + 1]) << "an empty group";
    for (int64_t t = g.starts[k]; t < g.starts[k + 1]; ++t) {
      EXPECT_EQ(ids[static_cast<size_t>(g.tokens[static_cast<size_t>(t)])] - first, g.rows[k]);
    }
  }
}

// ---- Embedding forward and the grouped backward ----

struct EmbeddingShape {
  int64_t vocab, d, n;
};
const EmbeddingShape kEmbeddingShapes[] = {
    {5, 3, 1000}, {50, 64, 31}, {1000, 7, 1}, {37, 2049, 200}, {50, 1, 333}};

TEST_F(LossKernelTest, EmbeddingForwardIsTheCpuGatherExactly) {
  std::mt19937_64 rng(12);
  for (const EmbeddingShape& s : kEmbeddingShapes) {
    SCOPED_TRACE("vocab = " + std::to_string(s.vocab) + ", d = " + std::to_string(s.d));
    const auto ids = random_ids(s.n, 0, static_cast<int32_t>(s.vocab), rng);
    const auto table = random_floats(s.vocab * s.d, rng);
    std::vector<float> out(static_cast<size_t>(s.n * s.d));
    ops::embedding_forward(ids.data(), table.data(), out.data(), s.n, s.d);
    const DeviceBuffer d_ids = upload(ids), d_table = upload(table);
    std::vector<float> runs[2];
    for (auto& run : runs) {
      DeviceGuarded<float> g_out(std::vector<float>(out.size(), 5.0f));
      ASSERT_TRUE(succeeded(
          embedding_forward(d_ids.as<int32_t>(), d_table.as<float>(), g_out.get(), s.n, s.d)));
      run = g_out.values();
    }
    expect_same_bits(runs[0], out, "embedding_forward against the cpu");
    expect_same_bits(runs[0], runs[1], "embedding_forward");
  }
}

TEST_F(LossKernelTest, EmbeddingForwardRangeZeroesTheRowsOfIdsNotHeld) {
  std::mt19937_64 rng(13);
  const int64_t n = 500, d = 33, first = 10, count = 20;
  auto ids = random_ids(n, 0, 50, rng);
  ids[0] = static_cast<int32_t>(first), ids[1] = static_cast<int32_t>(first + count - 1);
  ids[2] = static_cast<int32_t>(first - 1), ids[3] = static_cast<int32_t>(first + count);
  const auto table = random_floats(count * d, rng);
  std::vector<float> out(static_cast<size_t>(n * d), 5.0f);
  ops::embedding_forward_range(ids.data(), table.data(), out.data(), n, d, first, count);
  const DeviceBuffer d_ids = upload(ids), d_table = upload(table);
  DeviceGuarded<float> g_out(std::vector<float>(out.size(), 5.0f));
  ASSERT_TRUE(succeeded(embedding_forward_range(d_ids.as<int32_t>(), d_table.as<float>(),
                                                g_out.get(), n, d, first, count)));
  expect_same_bits(g_out.values(), out, "embedding_forward_range against the cpu");

  // A negative id (never valid, the CPU twin's callers reject it) reads nothing: zeros. The
  // other ids index the count-row table as a whole vocabulary.
  auto bad_ids = random_ids(n, 0, static_cast<int32_t>(count), rng);
  bad_ids[4] = -1;
  const DeviceBuffer d_bad = upload(bad_ids);
  DeviceGuarded<float> g_bad(std::vector<float>(out.size(), 5.0f));
  ASSERT_TRUE(succeeded(embedding_forward(d_bad.as<int32_t>(), d_table.as<float>(), g_bad.get(),
                                          n, d)));
  // The range form over [0, count) is that definition on the CPU: a zero row for id -1.
  std::vector<float> expected(out.size());
  ops::embedding_forward_range(bad_ids.data(), table.data(), expected.data(), n, d, 0, count);
  expect_same_bits(g_bad.values(), expected, "embedding_forward with a negative id");
}

// The grouped backward from `ids` held in [first, first + count) into a (count, d) table that
// starts at dtable0; returns the table (two runs, which must agree bit for bit).
std::vector<float> gpu_embedding_backward(const std::vector<int32_t>& ids,
                                          const std::vector<float>& dout,
                                          const std::vector<float>& dtable0, int64_t d,
                                          int64_t first, int64_t count) {
  const auto n = static_cast<int64_t>(ids.size());
  const EmbeddingGrouping g = group_tokens_by_row(ids.data(), n, first, count);
  const DeviceBuffer d_rows = upload(g.rows), d_starts = upload(g.starts),
                     d_tokens = upload(g.tokens), d_dout = upload(dout);
  std::vector<float> runs[2];
  for (auto& run : runs) {
    DeviceGuarded<float> g_dtable(dtable0);
    EXPECT_TRUE(succeeded(embedding_backward_grouped(
        d_rows.as<int32_t>(), d_starts.as<int64_t>(), d_tokens.as<int64_t>(), g.groups(),
        d_dout.as<float>(), g_dtable.get(), d)));
    run = g_dtable.values();
  }
  expect_same_bits(runs[0], runs[1], "embedding_backward_grouped");
  return runs[0];
}

TEST_F(LossKernelTest, GroupedEmbeddingBackwardIsBitwiseTheCpuScatterAdd) {
  std::mt19937_64 rng(14);
  for (const EmbeddingShape& s : kEmbeddingShapes) {
    SCOPED_TRACE("vocab = " + std::to_string(s.vocab) + ", d = " + std::to_string(s.d));
    // Few distinct ids for many tokens: long per-row sums whose order matters.
    const auto ids = random_ids(s.n, 0, static_cast<int32_t>(s.vocab), rng);
    const auto dout = random_floats(s.n * s.d, rng), dtable0 = random_floats(s.vocab * s.d, rng);
    std::vector<float> dtable = dtable0;
    ops::embedding_backward(ids.data(), dout.data(), dtable.data(), s.n, s.d);
    expect_same_bits(gpu_embedding_backward(ids, dout, dtable0, s.d, 0, s.vocab), dtable,
                     "embedding backward against the cpu");

    const int64_t first = s.vocab / 3, count = std::max<int64_t>(1, s.vocab / 2);
    const auto shard0 = random_floats(count * s.d, rng);
    std::vector<float> shard = shard0;
    ops::embedding_backward_range(ids.data(), dout.data(), shard.data(), s.n, s.d, first, count);
    expect_same_bits(gpu_embedding_backward(ids, dout, shard0, s.d, first, count), shard,
                     "embedding backward (range) against the cpu");
  }
}

// ---- Softmax cross-entropy ----

struct LossShape {
  int64_t n, vocab;
};
const LossShape kLossShapes[] = {{1, 1}, {3, 10}, {17, 1000}, {4, 50257}, {6, 32000}};

// Seeded logits with a widely spread row 0 (most exps underflow) and a row 1 offset by 1e4.
std::vector<float> loss_logits(const LossShape& s, std::mt19937_64& rng) {
  auto logits = random_floats(s.n * s.vocab, rng);
  for (int64_t j = 0; j < s.vocab; ++j) logits[static_cast<size_t>(j)] *= 1000.0f;
  if (s.n > 1) {
    for (int64_t j = s.vocab; j < 2 * s.vocab; ++j) logits[static_cast<size_t>(j)] += 1e4f;
  }
  return logits;
}

TEST_F(LossKernelTest, SoftmaxCrossEntropyMatchesTheCpuWithAndWithoutTheGradient) {
  std::mt19937_64 rng(15);
  for (const LossShape& s : kLossShapes) {
    for (const bool write_grad : {false, true}) {
      SCOPED_TRACE("n = " + std::to_string(s.n) + ", vocab = " + std::to_string(s.vocab) +
                   (write_grad ? ", with gradient" : ""));
      const auto logits = loss_logits(s, rng);
      const auto targets = random_ids(s.n, 0, static_cast<int32_t>(s.vocab), rng);
      const float grad_scale = 1.0f / static_cast<float>(s.n);
      std::vector<float> grad = logits, losses(static_cast<size_t>(s.n));
      ops::softmax_cross_entropy(grad.data(), targets.data(), losses.data(), s.n, s.vocab,
                                 grad_scale, write_grad);
      const DeviceBuffer d_targets = upload(targets);
      std::vector<float> runs[2][2];
      for (auto& run : runs) {
        DeviceGuarded<float> g_logits(logits), g_losses(std::vector<float>(losses.size(), 3.0f));
        ASSERT_TRUE(succeeded(softmax_cross_entropy(g_logits.get(), d_targets.as<int32_t>(),
                                                    g_losses.get(), s.n, s.vocab, grad_scale,
                                                    write_grad)));
        run[0] = g_losses.values(), run[1] = g_logits.values();
      }
      expect_near_all(runs[0][0], losses, relative(kLossTolerance), "losses");
      if (write_grad) {
        expect_near_all(runs[0][1], grad, gradient_tolerance(grad_scale), "gradient");
      } else {
        expect_same_bits(runs[0][1], logits, "logits left alone without write_grad");
      }
      for (int k = 0; k < 2; ++k) expect_same_bits(runs[0][k], runs[1][k], "cross-entropy");
    }
  }
}

// A target outside [0, vocab) (the CPU twin's callers reject it; the CPU would read out of
// bounds) makes that row's loss and gradient NaN; the other rows are unaffected.
TEST_F(LossKernelTest, SoftmaxCrossEntropyMarksRowsWithInvalidTargetsNan) {
  std::mt19937_64 rng(16);
  const LossShape s{5, 300};
  const auto logits = loss_logits(s, rng);
  auto targets = random_ids(s.n, 0, 300, rng);
  std::vector<float> grad = logits, losses(static_cast<size_t>(s.n));
  ops::softmax_cross_entropy(grad.data() + 2 * s.vocab, targets.data() + 2, losses.data() + 2,
                             s.n - 2, s.vocab, 0.5f, true);
  targets[0] = -1, targets[1] = 300;
  const DeviceBuffer d_targets = upload(targets);
  DeviceGuarded<float> g_logits(logits), g_losses(std::vector<float>(losses.size(), 0.0f));
  ASSERT_TRUE(succeeded(softmax_cross_entropy(g_logits.get(), d_targets.as<int32_t>(),
                                              g_losses.get(), s.n, s.vocab, 0.5f, true)));
  const std::vector<float> got_losses = g_losses.values(), got_grad = g_logits.values();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::isnan(got_losses[i])) << "row " << i;
    for (int64_t j = 0; j < s.vocab; ++j) {
      ASSERT_TRUE(std::isnan(got_grad[i * s.vocab + static_cast<size_t>(j)])) << "row " << i;
    }
  }
  expect_near_all(std::vector<float>(got_losses.begin() + 2, got_losses.end()),
                  std::vector<float>(losses.begin() + 2, losses.end()), relative(kLossTolerance),
                  "valid rows' losses");
  expect_near_all(std::vector<float>(got_grad.begin() + 2 * s.vocab, got_grad.end()),
                  std::vector<float>(grad.begin() + 2 * s.vocab, grad.end()),
                  gradient_tolerance(0.5f), "valid rows' gradient");
}

// ---- The vocabulary-parallel pieces ----

struct VocabShape {
  int64_t n, ld, real, first;
};
// Padding columns (ld > real), a shard holding nothing (real = 0), a wide unpadded shard.
const VocabShape kVocabShapes[] = {{9, 70, 61, 100}, {3, 4, 0, 50}, {3, 20000, 20000, 0},
                                   {1, 1, 1, 7}};

// Runs `kernel` (writing `out`, from `initial`) twice; the runs must agree bit for bit.
template <typename Kernel>
std::vector<float> run_twice(const std::vector<float>& initial, Kernel kernel, const char* what) {
  std::vector<float> runs[2];
  for (auto& run : runs) {
    DeviceGuarded<float> out(initial);
    EXPECT_TRUE(succeeded(kernel(out.get())));
    run = out.values();
  }
  expect_same_bits(runs[0], runs[1], what);
  return runs[0];
}

TEST_F(LossKernelTest, VocabPiecesMatchTheCpuWithPaddingAndTargetsHeldOrNot) {
  std::mt19937_64 rng(17);
  for (const VocabShape& s : kVocabShapes) {
    SCOPED_TRACE("n = " + std::to_string(s.n) + ", ld = " + std::to_string(s.ld) +
                 ", real = " + std::to_string(s.real));
    auto logits = random_floats(s.n * s.ld, rng);
    for (int64_t i = 0; i < s.n; ++i) {  // huge padding: any read of it shows
      for (int64_t j = s.real; j < s.ld; ++j) logits[static_cast<size_t>(i * s.ld + j)] = 1e30f;
    }
    // Targets at both edges of the shard, just outside it, and anywhere in a 3x wider vocab.
    auto targets = random_ids(s.n, 0, static_cast<int32_t>(s.first + 2 * s.real + 1), rng);
    const int64_t edges[] = {s.first, s.first + s.real - 1, s.first - 1, s.first + s.real};
    for (int64_t i = 0; i < std::min<int64_t>(s.n, 4); ++i) {
      targets[static_cast<size_t>(i)] = static_cast<int32_t>(std::max<int64_t>(0, edges[i]));
    }
    const float grad_scale = 0.125f;
    const auto n = static_cast<size_t>(s.n);
    std::vector<float> max(n), pairs(2 * n), lse(n), losses(n), grad = logits;
    ops::vocab_row_max(logits.data(), s.ld, s.real, max.data(), s.n);
    ops::vocab_local_sums(logits.data(), s.ld, s.real, s.first, targets.data(), max.data(),
                          pairs.data(), s.n);
    ops::vocab_losses(max.data(), pairs.data(), lse.data(), losses.data(), s.n);
    ops::vocab_local_grad(grad.data(), s.ld, s.real, s.first, targets.data(), lse.data(),
                          grad_scale, s.n);
    // Each kernel reads the CPU's previous piece, so each is compared on its own.
    const DeviceBuffer d_logits = upload(logits), d_targets = upload(targets),
                       d_max = upload(max), d_pairs = upload(pairs), d_lse = upload(lse);
    const auto* t = d_targets.as<int32_t>();
    const std::vector<float> got_max = run_twice(std::vector<float>(n, 1.0f), [&](float* out) {
      return vocab_row_max(d_logits.as<float>(), s.ld, s.real, out, s.n);
    }, "vocab_row_max");
    expect_same_bits(got_max, max, "vocab_row_max against the cpu");
    const std::vector<float> got_pairs = run_twice(std::vector<float>(2 * n, 1.0f),
                                                   [&](float* out) {
      return vocab_local_sums(d_logits.as<float>(), s.ld, s.real, s.first, t, d_max.as<float>(),
                              out, s.n);
    }, "vocab_local_sums");
    expect_near_all(got_pairs, pairs, relative(kLossTolerance), "pairs");
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(got_pairs[2 * i + 1], pairs[2 * i + 1]) << i;
    // lse and losses as one output array: [lse | losses].
    std::vector<float> both(lse);
    both.insert(both.end(), losses.begin(), losses.end());
    const std::vector<float> got_both = run_twice(std::vector<float>(2 * n, 1.0f), [&](float* out) {
      return vocab_losses(d_max.as<float>(), d_pairs.as<float>(), out, out + s.n, s.n);
    }, "vocab_losses");
    expect_near_all(got_both, both, relative(kLossTolerance), "lse and losses");
    const std::vector<float> got_grad = run_twice(logits, [&](float* out) {
      return vocab_local_grad(out, s.ld, s.real, s.first, t, d_lse.as<float>(), grad_scale, s.n);
    }, "vocab_local_grad");
    expect_near_all(got_grad, grad, gradient_tolerance(grad_scale), "local gradient");
  }
}

// ---- Argument checks: answered before any CUDA call, so they pass without a GPU ----

bool contains(const Status& s, const std::string& part) {
  return s.message().find(part) != std::string::npos;
}
alignas(64) float host[4096];
alignas(64) int32_t host_ids[64];
alignas(64) int64_t host_offsets[64];

TEST(LossKernelArgsTest, NullPointersAreNamed) {
  Status s = embedding_forward(nullptr, host, host + 64, 4, 8);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "kernels::embedding_forward: ids is null")) << s.message();
  s = embedding_forward_range(host_ids, nullptr, host, 4, 8, 0, 3);
  EXPECT_TRUE(contains(s, "kernels::embedding_forward_range: table is null")) << s.message();
  s = embedding_backward_grouped(host_ids, nullptr, host_offsets, 2, host, host + 64, 4);
  EXPECT_TRUE(contains(s, "kernels::embedding_backward_grouped: starts is null")) << s.message();
  s = softmax_cross_entropy(host, nullptr, host + 64, 2, 8, 1.0f, true);
  EXPECT_TRUE(contains(s, "kernels::softmax_cross_entropy: targets is null")) << s.message();
  s = vocab_row_max(host, 8, 8, nullptr, 2);
  EXPECT_TRUE(contains(s, "kernels::vocab_row_max: max is null")) << s.message();
  s = vocab_local_sums(host, 8, 8, 0, host_ids, host + 64, nullptr, 2);
  EXPECT_TRUE(contains(s, "kernels::vocab_local_sums: pairs is null")) << s.message();
  s = vocab_losses(host, host + 8, nullptr, host + 16, 2);
  EXPECT_TRUE(contains(s, "kernels::vocab_losses: lse is null")) << s.message();
  s = vocab_local_grad(host, 8, 8, 0, host_ids, nullptr, 1.0f, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "kernels::vocab_local_grad: lse is null")) << s.message();
}

TEST(LossKernelArgsTest, BadShapesAreInvalidArgumentNamingTheArgument) {
  Status s = embedding_forward_range(host_ids, host, host + 64, 4, 8, 0, -1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(s, "count is -1")) << s.message();
  s = embedding_backward_grouped(host_ids, host_offsets, host_offsets, -1, host, host, 4);
  EXPECT_TRUE(contains(s, "groups is -1")) << s.message();
  s = softmax_cross_entropy(host, host_ids, host + 64, 2, 0, 1.0f, true);
  EXPECT_TRUE(contains(s, "kernels::softmax_cross_entropy: vocab is 0")) << s.message();
  s = vocab_row_max(host, 3, 5, host + 64, 2);
  EXPECT_TRUE(contains(s, "kernels::vocab_row_max: ld is 3; it must be at least 5"))
      << s.message();
  s = vocab_local_grad(host, 8, -1, 0, host_ids, host + 64, 1.0f, 2);
  EXPECT_TRUE(contains(s, "real is -1")) << s.message();
  s = vocab_losses(host, host + 8, host + 16, host + 24, -3);
  EXPECT_TRUE(contains(s, "kernels::vocab_losses: n is -3")) << s.message();
  // losses written over the logits would corrupt the rows being read.
  s = softmax_cross_entropy(host, host_ids, host + 4, 2, 8, 1.0f, true);
  EXPECT_TRUE(contains(s, "losses and logits overlap")) << s.message();
}

TEST(LossKernelArgsTest, EmptyWorkSucceedsWithoutTouchingCuda) {
  EXPECT_TRUE(embedding_forward(nullptr, nullptr, nullptr, 0, 8).ok());
  EXPECT_TRUE(embedding_forward_range(nullptr, nullptr, nullptr, 0, 8, 5, 0).ok());
  EXPECT_TRUE(embedding_backward_grouped(nullptr, nullptr, nullptr, 0, nullptr, nullptr, 8).ok());
  EXPECT_TRUE(softmax_cross_entropy(nullptr, nullptr, nullptr, 0, 100, 1.0f, true).ok());
  EXPECT_TRUE(vocab_row_max(nullptr, 8, 8, nullptr, 0).ok());
  EXPECT_TRUE(vocab_local_sums(nullptr, 8, 8, 0, nullptr, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(vocab_losses(nullptr, nullptr, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(vocab_local_grad(nullptr, 8, 8, 0, nullptr, nullptr, 1.0f, 0).ok());
}

}  // namespace
}  // namespace ms::kernels
