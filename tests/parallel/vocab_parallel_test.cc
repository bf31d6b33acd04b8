// Vocabulary-parallel embedding and cross-entropy at every tp the world allows against
// ops::embedding_* and ops::softmax_cross_entropy on the unpadded vocabulary (outputs, losses
// and gathered gradients within 1e-5 relative), bitwise repeatability, a finite-difference
// check of the cross-entropy gradient, and padding that never reaches the loss or a real
// gradient whatever the padded rows and columns hold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/linear.h"
#include "parallel/vocab_parallel.h"
#include "tests/parallel/tp_harness.h"

namespace ms::parallel {
namespace {

using testing::cols_of;
using testing::expect_close;
using testing::gather;
using testing::gather_cols;
using testing::random_values;
using testing::rows_of;

// Vocabularies no tp in {2, 4} divides, and 5 over 4 ranks leaves rank 3 only padding.
constexpr int64_t kVocabs[] = {37, 5, 8};

// n ids in [0, vocab), seeded, with the first and last token always present.
std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
  const std::vector<float> u = random_values(n, seed, "ids", 0.0f, 1.0f);
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = static_cast<int32_t>(std::min<int64_t>(vocab - 1, static_cast<int64_t>(u[i] * vocab)));
  }
  ids[0] = 0;
  ids[n - 1] = static_cast<int32_t>(vocab - 1);
  return ids;
}

// (rows, vocab) -> (rows, padded) with `fill` in the padded columns.
std::vector<float> pad_columns(const std::vector<float>& m, int64_t rows, int64_t vocab,
                               int64_t padded, float fill) {
  std::vector<float> out(rows * padded, fill);
  for (int64_t i = 0; i < rows; ++i) {
    std::copy_n(m.begin() + i * vocab, vocab, out.begin() + i * padded);
  }
  return out;
}

// Rows [vocab, padded) of a gathered (padded, d) table gradient, or columns of (n, padded)
// logits gradient, must be exactly zero.
void expect_zero(const std::vector<float>& v, const std::string& what) {
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], 0.0f) << what << " element " << i;
}

class VocabParallel : public testing::TpTest {
 protected:
  VocabShard shard_of(int64_t vocab, const comm::Communicator& tp) {
    return *vocab_shard(vocab, tp.size(), tp.rank());
  }
  // fn(tp group, this rank's shard, "tp T vocab V") at every tp the world allows and every
  // vocabulary of kVocabs.
  void each_tp_and_vocab(
      const std::function<void(comm::Communicator&, const VocabShard&, const std::string&)>& fn) {
    for (int tp_size : tp_sizes()) {
      auto tp = tp_group(tp_size);
      ASSERT_NE(tp, nullptr);
      for (int64_t vocab : kVocabs) {
        fn(*tp, shard_of(vocab, *tp),
           "tp " + std::to_string(tp_size) + " vocab " + std::to_string(vocab));
      }
    }
  }
};

// The embedding's outputs and table gradient at (tp, vocab, sp), padded table rows set to NaN:
// a lookup that read one would poison the output.
void check_embedding(comm::Communicator& tp, const VocabShard& shard, bool sp) {
  const int64_t n = 12, d = 6, vocab = shard.vocab;
  const std::string what = "tp " + std::to_string(tp.size()) + " vocab " +
                           std::to_string(vocab) + (sp ? " sp" : "");
  const std::vector<int32_t> ids = random_ids(n, vocab, 2);
  const std::vector<float> table = random_values(vocab * d, 2, "table");
  const std::vector<float> dout = random_values(n * d, 2, "dout");
  std::vector<float> out_ref(n * d), dtable_ref(vocab * d, 0.0f);
  ops::embedding_forward(ids.data(), table.data(), out_ref.data(), n, d);
  ops::embedding_backward(ids.data(), dout.data(), dtable_ref.data(), n, d);

  std::vector<float> padded = table;
  padded.resize(shard.padded * d, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> local = rows_of(padded, d, {shard.begin, shard.length});
  const VocabEmbeddingShape shape{n, d, sp};
  const TpSlice seq = *tp_slice(n, tp.size(), tp.rank(), "rows");
  std::vector<float> out(sp ? seq.length * d : n * d), dtable(local.size(), 0.0f);
  ASSERT_TRUE(vocab_parallel_embedding_forward(tp, shard, shape, ids.data(), local.data(),
                                               out.data())
                  .ok());
  const std::vector<float> dout_local = sp ? rows_of(dout, d, seq) : dout;
  ASSERT_TRUE(vocab_parallel_embedding_backward(tp, shard, shape, ids.data(), dout_local.data(),
                                                dtable.data())
                  .ok());
  expect_close(sp ? gather(tp, out) : out, out_ref, what + " out");
  const std::vector<float> all = gather(tp, dtable);
  expect_close({all.begin(), all.begin() + vocab * d}, dtable_ref, what + " dtable");
  expect_zero({all.begin() + vocab * d, all.end()}, what + " padded dtable rows");
}

TEST_F(VocabParallel, EmbeddingEqualsTheSingleProcessLookup) {
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (int64_t vocab : kVocabs) {
      for (bool sp : {false, true}) check_embedding(*tp, shard_of(vocab, *tp), sp);
    }
  }
}

// Losses and gathered logit gradients of the vocabulary-parallel cross-entropy, the padded
// logit columns holding `fill`.
struct CrossEntropyRun {
  std::vector<float> losses;
  std::vector<float> grad;  // (n, padded), gathered
};

CrossEntropyRun run_cross_entropy(comm::Communicator& tp, const VocabShard& shard,
                                  const std::vector<float>& logits,
                                  const std::vector<int32_t>& targets, float fill) {
  const int64_t n = static_cast<int64_t>(targets.size());
  const std::vector<float> padded = pad_columns(logits, n, shard.vocab, shard.padded, fill);
  std::vector<float> local = cols_of(padded, n, shard.padded, {shard.begin, shard.length});
  CrossEntropyRun run{std::vector<float>(n), {}};
  const Status s = vocab_parallel_cross_entropy(tp, shard, local.data(), targets.data(),
                                                run.losses.data(), n, 1.0f / n, true);
  EXPECT_TRUE(s.ok()) << s.to_string();
  run.grad = gather_cols(tp, local, n, shard.padded);
  return run;
}

TEST_F(VocabParallel, CrossEntropyEqualsTheSingleProcessLoss) {
  const int64_t n = 9;
  each_tp_and_vocab([&](comm::Communicator& tp, const VocabShard& shard, const std::string& what) {
    const int64_t vocab = shard.vocab;
    const std::vector<float> logits = random_values(n * vocab, 4, "logits", -4.0f, 4.0f);
    const std::vector<int32_t> targets = random_ids(n, vocab, 4);
    std::vector<float> grad_ref = logits, losses_ref(n);
    ops::softmax_cross_entropy(grad_ref.data(), targets.data(), losses_ref.data(), n, vocab,
                               1.0f / n, true);
    const CrossEntropyRun run = run_cross_entropy(tp, shard, logits, targets, 0.0f);
    expect_close(run.losses, losses_ref, what + " losses");
    expect_close(cols_of(run.grad, n, shard.padded, {0, vocab}), grad_ref, what + " grad");
  });
}

// RL's log-probs and entropies at chosen rows against the softmax of the whole row computed
// here in double, with NaN in the padded columns (never read), at every tp and vocabulary; all
// tp ranks get the same bits (each checks its values against rank 0's, gathered).
TEST_F(VocabParallel, LogProbsEqualTheWholeRowSoftmax) {
  const int64_t n = 7;
  const std::vector<int64_t> rows = {6, 0, 3, 3};
  each_tp_and_vocab([&](comm::Communicator& tp, const VocabShard& shard, const std::string& what) {
    const int64_t vocab = shard.vocab;
    const std::vector<float> logits = random_values(n * vocab, 5, "logits", -6.0f, 6.0f);
    const std::vector<int32_t> targets = random_ids(n, vocab, 5);
    const std::vector<float> padded = pad_columns(logits, n, vocab, shard.padded,
                                                  std::numeric_limits<float>::quiet_NaN());
    const std::vector<float> local = cols_of(padded, n, shard.padded, {shard.begin, shard.length});
    std::vector<double> lp(rows.size()), ent(rows.size());
    const Status s = vocab_parallel_log_probs(&tp, shard, local.data(), shard.length,
                                              targets.data(), rows, lp.data(), ent.data());
    ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
    for (size_t k = 0; k < rows.size(); ++k) {
      const float* z = logits.data() + rows[k] * vocab;
      double sum = 0.0, zp = 0.0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(z[v]));
      for (int64_t v = 0; v < vocab; ++v) {
        zp += std::exp(static_cast<double>(z[v])) / sum * static_cast<double>(z[v]);
      }
      const double lse = std::log(sum);
      EXPECT_NEAR(lp[k], static_cast<double>(z[targets[rows[k]]]) - lse, 1e-12) << what;
      EXPECT_NEAR(ent[k], lse - zp, 1e-12) << what;
    }
    std::vector<double> mine = lp;
    mine.insert(mine.end(), ent.begin(), ent.end());
    std::vector<double> all(mine.size() * static_cast<size_t>(tp.size()));
    ASSERT_TRUE(tp.allgather(mine.data(), all.data(), mine.size() * sizeof(double), DType::kU8)
                    .ok());
    EXPECT_EQ(0, std::memcmp(mine.data(), all.data(), mine.size() * sizeof(double))) << what;
  });
}

// Padded columns holding huge, infinite or NaN values give bitwise the same losses and real
// gradients as zeros, and a zero gradient: were one column read, the max or the sum would move.
TEST_F(VocabParallel, PaddingNeverReachesTheLoss) {
  const int64_t n = 6;
  const float kFills[] = {1e30f, -1e30f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()};
  for (int tp_size : tp_sizes()) {
    if (tp_size == 1) continue;  // nothing is padded
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    for (int64_t vocab : {int64_t{37}, int64_t{5}}) {
      const VocabShard shard = shard_of(vocab, *tp);
      ASSERT_GT(shard.padded, vocab);
      const std::vector<float> logits = random_values(n * vocab, 6, "logits", -4.0f, 4.0f);
      const std::vector<int32_t> targets = random_ids(n, vocab, 6);
      const CrossEntropyRun base = run_cross_entropy(*tp, shard, logits, targets, 0.0f);
      for (float fill : kFills) {
        const std::string what = "tp " + std::to_string(tp_size) + " vocab " +
                                 std::to_string(vocab) + " padding " + std::to_string(fill);
        const CrossEntropyRun run = run_cross_entropy(*tp, shard, logits, targets, fill);
        EXPECT_TRUE(testing::bitwise_equal(run.losses, base.losses)) << what;
        EXPECT_TRUE(testing::bitwise_equal(run.grad, base.grad)) << what;
        expect_zero(cols_of(run.grad, n, shard.padded, {vocab, shard.padded - vocab}), what);
      }
    }
  }
}

// Central differences of each row's loss in each real logit against the analytic gradient.
// Perturbing logit (i, j) changes loss i only; the rank holding column j perturbs it and every
// rank runs the (collective) loss.
TEST_F(VocabParallel, CrossEntropyGradientMatchesFiniteDifferences) {
  const int64_t n = 3, vocab = 7;
  const float h = 1e-2f;
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const VocabShard shard = shard_of(vocab, *tp);
    const std::vector<float> logits = random_values(n * vocab, 8, "logits", -2.0f, 2.0f);
    const std::vector<int32_t> targets = random_ids(n, vocab, 8);
    const std::vector<float> padded = pad_columns(logits, n, vocab, shard.padded, 0.0f);
    const std::vector<float> local = cols_of(padded, n, shard.padded, {shard.begin, shard.length});
    std::vector<float> grad = local, losses(n);
    ASSERT_TRUE(vocab_parallel_cross_entropy(*tp, shard, grad.data(), targets.data(),
                                             losses.data(), n, 1.0f, true)
                    .ok());
    const std::vector<float> analytic = gather_cols(*tp, grad, n, shard.padded);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < vocab; ++j) {
        float loss[2];
        for (int side = 0; side < 2; ++side) {
          std::vector<float> moved = local;
          if (shard.holds(j)) moved[i * shard.length + j - shard.begin] += side ? -h : h;
          std::vector<float> out(n);
          ASSERT_TRUE(vocab_parallel_cross_entropy(*tp, shard, moved.data(), targets.data(),
                                                   out.data(), n, 1.0f, false)
                          .ok());
          loss[side] = out[i];
        }
        const float numeric = (loss[0] - loss[1]) / (2 * h);
        EXPECT_NEAR(numeric, analytic[i * shard.padded + j], 5e-4)
            << "tp " << tp_size << " row " << i << " column " << j;
      }
    }
  }
}

// The output layer as the model will run it: a column-parallel linear over the padded
// vocabulary, then the cross-entropy, then the linear's backward. The padded weight rows hold
// large values: they must reach neither the loss nor a real gradient, and their gradient is
// zero (so an optimizer leaves them as they are). They must be finite: the input gradient
// multiplies them by the zero padded-column gradient, and 0 * NaN is NaN.
TEST_F(VocabParallel, OutputLayerOverThePaddedVocabularyEqualsTheUnpaddedOne) {
  const int64_t n = 8, d = 5, vocab = 37;
  const std::vector<float> h = random_values(n * d, 12, "h");
  const std::vector<float> w = random_values(vocab * d, 12, "w");
  const std::vector<int32_t> targets = random_ids(n, vocab, 12);
  std::vector<float> logits(n * vocab), losses_ref(n), dh_ref(n * d, 0.0f), dw_ref(w.size(), 0.0f);
  ops::linear_forward(h.data(), w.data(), logits.data(), n, d, vocab);
  ops::softmax_cross_entropy(logits.data(), targets.data(), losses_ref.data(), n, vocab, 1.0f / n,
                             true);
  ops::linear_backward(h.data(), w.data(), logits.data(), dh_ref.data(), dw_ref.data(), n, d,
                       vocab);
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const VocabShard shard = shard_of(vocab, *tp);
    std::vector<float> w_padded = w;
    w_padded.resize(shard.padded * d, 1e3f);
    const std::vector<float> w_local = rows_of(w_padded, d, {shard.begin, shard.length});
    const TpSlice seq = *tp_slice(n, tp_size, tp->rank(), "rows");
    for (bool sp : {false, true}) {
      const std::string what = "tp " + std::to_string(tp_size) + (sp ? " sp" : "");
      const std::vector<float> h_local = sp ? rows_of(h, d, seq) : h;
      std::vector<float> out(n * shard.length), losses(n), dh(h_local.size(), 0.0f),
          dw(w_local.size(), 0.0f);
      // The output layer is column-parallel over the padded vocabulary: the whole (n, d)
      // input (gathered under SP) times this rank's rows of the weight.
      const std::vector<float> h_full = sp ? gather(*tp, h_local) : h_local;
      ops::linear_forward(h_full.data(), w_local.data(), out.data(), n, d, shard.length);
      ASSERT_TRUE(vocab_parallel_cross_entropy(*tp, shard, out.data(), targets.data(),
                                               losses.data(), n, 1.0f / n, true)
                      .ok());
      // Its backward: the weight gradient is local; the partial input gradients are summed
      // over tp (reduce-scattered back to the rank's rows under SP).
      std::vector<float> dh_partial(n * d, 0.0f);
      ops::linear_backward(h_full.data(), w_local.data(), out.data(), dh_partial.data(),
                           dw.data(), n, d, shard.length);
      if (sp) {
        ASSERT_TRUE(tp->reduce_scatter(dh_partial.data(), dh.data(), dh.size(), DType::kF32,
                                       comm::ReduceOp::kSum)
                        .ok());
      } else {
        ASSERT_TRUE(tp->allreduce(dh_partial.data(), dh.data(), dh.size(), DType::kF32,
                                  comm::ReduceOp::kSum)
                        .ok());
      }
      expect_close(losses, losses_ref, what + " losses");
      expect_close(sp ? gather(*tp, dh) : dh, dh_ref, what + " dh");
      const std::vector<float> all = gather(*tp, dw);
      expect_close({all.begin(), all.begin() + vocab * d}, dw_ref, what + " dw");
      expect_zero({all.begin() + vocab * d, all.end()}, what + " padded dw rows");
    }
  }
}

TEST_F(VocabParallel, TheSameRunTwiceIsBitwiseIdentical) {
  const int64_t n = 8, d = 4, vocab = 37;
  for (int tp_size : tp_sizes()) {
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const VocabShard shard = shard_of(vocab, *tp);
    const std::vector<float> logits = random_values(n * vocab, 10, "logits", -4.0f, 4.0f);
    const std::vector<int32_t> targets = random_ids(n, vocab, 10);
    const CrossEntropyRun a = run_cross_entropy(*tp, shard, logits, targets, 0.0f);
    const CrossEntropyRun b = run_cross_entropy(*tp, shard, logits, targets, 0.0f);
    EXPECT_TRUE(testing::bitwise_equal(a.losses, b.losses) &&
                testing::bitwise_equal(a.grad, b.grad))
        << "cross-entropy tp " << tp_size;
    const std::vector<float> table = random_values(shard.length * d, 10, "table");
    const std::vector<float> dout = random_values(n / tp_size * d, 10, "dout");
    std::vector<float> out[2], dtable[2];
    for (int run = 0; run < 2; ++run) {
      out[run].assign(n / tp_size * d, 0.0f);
      dtable[run].assign(table.size(), 0.0f);
      ASSERT_TRUE(vocab_parallel_embedding_forward(*tp, shard, {n, d, true}, targets.data(),
                                                   table.data(), out[run].data())
                      .ok());
      ASSERT_TRUE(vocab_parallel_embedding_backward(*tp, shard, {n, d, true}, targets.data(),
                                                    dout.data(), dtable[run].data())
                      .ok());
    }
    EXPECT_TRUE(testing::bitwise_equal(out[0], out[1]) &&
                testing::bitwise_equal(dtable[0], dtable[1]))
        << "embedding tp " << tp_size;
  }
}

TEST_F(VocabParallel, EmbeddingRefusesSequenceShardsTpDoesNotDivide) {
  for (int tp_size : tp_sizes()) {
    if (tp_size == 1) continue;
    auto tp = tp_group(tp_size);
    ASSERT_NE(tp, nullptr);
    const VocabShard shard = shard_of(37, *tp);
    std::vector<int32_t> ids(64, 0);
    std::vector<float> buf(64 * 64, 0.0f);
    const Status s = vocab_parallel_embedding_forward(*tp, shard, {tp_size + 1, 4, true},
                                                      ids.data(), buf.data(), buf.data());
    EXPECT_NE(s.message().find("sequence parallelism"), std::string::npos) << s.to_string();
  }
}

}  // namespace
}  // namespace ms::parallel
