// The actor's update path on a real model under mpirun (1 and 2 ranks):
//   - the token-weighted backward (Transformer::forward_backward_weighted) equals the plain
//     cross-entropy backward for uniform weights, and is linear in the weights;
//   - the hybrid engine: an engine built on the actor sees each optimizer update at once (its
//     logits move, and match the full forward of the updated model);
//   - data-parallel invariance: every rank holding part of the batch, with the global token and
//     response counts in the aggregation scope and the optimizer's sum over ranks divided by dp,
//     gives the gradient of one rank holding the union batch, in every aggregation mode.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "comm/mpi_communicator.h"
#include "infer/engine.h"
#include "model/transformer.h"
#include "rl/actor.h"
#include "rl/advantage.h"
#include "rl/losses.h"
#include "train/distributed_optimizer.h"

namespace ms::rl {
namespace {

config::ModelConfig tiny() {
  config::ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 32;
  c.max_seq_len = 32;
  c.moe.num_experts = 0;
  return c;
}

std::unique_ptr<model::Transformer> make_model() {
  auto m = model::Transformer::create(tiny(), 7);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return std::move(*m);
}

// Eight samples with prompts of 2..5 tokens and responses of 0..6, the same on every rank.
std::vector<Sample> make_samples() {
  std::mt19937 rng(11);
  std::vector<Sample> samples(8);
  for (size_t i = 0; i < samples.size(); ++i) {
    samples[i].prompt.resize(2 + i % 4);
    samples[i].response.resize(i == 3 ? 0 : 1 + (i * 5) % 7);
    for (int32_t& t : samples[i].prompt) t = static_cast<int32_t>(rng() % 64);
    for (int32_t& t : samples[i].response) t = static_cast<int32_t>(rng() % 64);
  }
  return samples;
}

std::vector<const Sample*> pointers(const std::vector<Sample>& s, size_t first, size_t last) {
  std::vector<const Sample*> out;
  for (size_t i = first; i < last; ++i) out.push_back(&s[i]);
  return out;
}

std::vector<train::TrainableParam> trainable(model::Transformer& m) {
  std::vector<train::TrainableParam> params;
  for (model::Parameter& p : m.parameters()) {
    if (p.trainable) params.push_back({p.name, &p.value, &p.grad, p.weight_decay, true, true});
  }
  return params;
}

TEST(WeightedBackward, UniformWeightsEqualCrossEntropyAndAreLinear) {
  auto a = make_model();
  auto b = make_model();
  const int64_t B = 2, T = 6;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    inputs[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7) % 64);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 13 + 5) % 64);
  }
  ASSERT_TRUE(a->forward_backward(inputs.data(), targets.data(), B, T, 1.0f).ok());
  std::vector<float> uniform(B * T, 1.0f / static_cast<float>(B * T));
  std::vector<float> losses(B * T);
  auto r = b->forward_backward_weighted(inputs.data(), targets.data(), uniform, B, T, losses);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  double mean = 0;
  for (float l : losses) mean += l;
  EXPECT_NEAR(mean / (B * T), r->loss, 1e-6);
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    const auto& ga = a->parameters()[i].grad;
    const auto& gb = b->parameters()[i].grad;
    for (int64_t k = 0; k < ga.numel(); ++k) {
      ASSERT_NEAR(ga.data<float>()[k], gb.data<float>()[k], 1e-6) << a->parameters()[i].name;
    }
  }
  // Linearity: weights w1 then w2 accumulated equal w1 + w2 at once.
  std::vector<float> w1(B * T), w2(B * T), sum(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    w1[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i % 3) - 0.05f;
    w2[static_cast<size_t>(i)] = i % 2 == 0 ? 0.2f : 0.0f;
    sum[static_cast<size_t>(i)] = w1[static_cast<size_t>(i)] + w2[static_cast<size_t>(i)];
  }
  a->zero_grads();
  b->zero_grads();
  ASSERT_TRUE(a->forward_backward_weighted(inputs.data(), targets.data(), w1, B, T).ok());
  ASSERT_TRUE(a->forward_backward_weighted(inputs.data(), targets.data(), w2, B, T).ok());
  ASSERT_TRUE(b->forward_backward_weighted(inputs.data(), targets.data(), sum, B, T).ok());
  for (size_t i = 0; i < a->parameters().size(); ++i) {
    const auto& ga = a->parameters()[i].grad;
    const auto& gb = b->parameters()[i].grad;
    for (int64_t k = 0; k < ga.numel(); ++k) {
      ASSERT_NEAR(ga.data<float>()[k], gb.data<float>()[k], 1e-5) << a->parameters()[i].name;
    }
  }
  EXPECT_FALSE(b->forward_backward_weighted(inputs.data(), targets.data(),
                                            std::span(sum).first(3), B, T).ok());
}

// The sign of the whole chain (loss gradient -> token weights -> backward): a small step down
// the policy loss raises the log-probs of the response with a positive advantage and lowers
// those of the one with a negative advantage.
TEST(WeightedBackward, DescentFollowsTheAdvantages) {
  auto actor = make_model();
  const std::vector<Sample> samples = make_samples();
  const auto two = pointers(samples, 0, 2);
  const ResponseLayout layout = *response_layout(two);
  auto before = evaluate_policy(*actor, two, 4, 0);
  ASSERT_TRUE(before.ok());
  const std::vector<double> advantages = {1.0, -1.0};
  auto token_adv = broadcast_to_tokens(layout, advantages);
  auto loss = clipped_policy_loss(layout, before->log_probs, before->log_probs, *token_adv,
                                  PolicyClip{}, AggregationScope{});
  ASSERT_TRUE(loss.ok());
  actor->zero_grads();
  ASSERT_TRUE(backward_policy(*actor, two, loss->gradient, 4, 0).ok());
  for (model::Parameter& p : actor->parameters()) {
    for (int64_t k = 0; k < p.value.numel(); ++k) {
      p.value.data<float>()[k] -= 0.05f * p.grad.data<float>()[k];
    }
  }
  auto after = evaluate_policy(*actor, two, 4, 0);
  ASSERT_TRUE(after.ok());
  double up = 0, down = 0;
  for (int64_t t = layout.begin(0); t < layout.end(0); ++t) {
    up += after->log_probs[static_cast<size_t>(t)] - before->log_probs[static_cast<size_t>(t)];
  }
  for (int64_t t = layout.begin(1); t < layout.end(1); ++t) {
    down += after->log_probs[static_cast<size_t>(t)] - before->log_probs[static_cast<size_t>(t)];
  }
  EXPECT_GT(up, 0.0) << "the positive-advantage response became less likely";
  EXPECT_LT(down, 0.0) << "the negative-advantage response became more likely";
}

TEST(HybridEngine, SeesEachUpdateWithoutACopy) {
  auto world = comm::MpiCommunicator::world("dp");
  ASSERT_TRUE(world.ok());
  auto actor = make_model();
  auto optimizer = train::DistributedOptimizer::create(**world, trainable(*actor),
                                                       config::OptimConfig{}, {});
  ASSERT_TRUE(optimizer.ok()) << optimizer.status().to_string();
  infer::EngineOptions options;
  options.keep_logits = true;
  options.kv_blocks = 16;
  options.block_size = 8;
  auto engine = infer::Engine::create(*actor, nullptr, options);
  ASSERT_TRUE(engine.ok());
  infer::Request request;
  request.prompt = {3, 17, 42, 5};
  request.max_tokens = 1;
  auto before = (*engine)->generate({request});
  ASSERT_TRUE(before.ok());
  // One update from a policy-gradient-shaped loss on a few samples.
  const std::vector<Sample> samples = make_samples();
  const auto all = pointers(samples, 0, samples.size());
  auto layout = response_layout(all);
  ASSERT_TRUE(layout.ok());
  std::vector<double> grad(static_cast<size_t>(layout->num_tokens()));
  for (size_t k = 0; k < grad.size(); ++k) grad[k] = k % 2 == 0 ? -0.1 : 0.05;
  (*optimizer)->begin_step();
  ASSERT_TRUE(backward_policy(*actor, all, grad, 3, 0).ok());
  ASSERT_TRUE((*optimizer)->finish_reduction().ok());
  ASSERT_TRUE((*optimizer)->apply(0.05, 1.0).ok());
  auto after = (*engine)->generate({request});
  ASSERT_TRUE(after.ok());
  const std::vector<float>& l0 = (*before)[0].logits[0];
  const std::vector<float>& l1 = (*after)[0].logits[0];
  double moved = 0;
  for (size_t v = 0; v < l0.size(); ++v) moved = std::max(moved, std::abs(double(l1[v]) - l0[v]));
  EXPECT_GT(moved, 1e-3) << "the engine did not see the update";
  auto full = actor->forward_logits(request.prompt.data(), 1, 4);
  ASSERT_TRUE(full.ok());
  const float* last = full->data<float>() + 3 * 64;
  for (size_t v = 0; v < l1.size(); ++v) EXPECT_NEAR(l1[v], last[v], 1e-4) << v;
}

class DataParallelInvariance : public ::testing::TestWithParam<LossAggregation> {};

TEST_P(DataParallelInvariance, RanksEqualTheUnionBatch) {
  auto world = comm::MpiCommunicator::world("dp");
  ASSERT_TRUE(world.ok());
  const int dp = (*world)->size();
  const int rank = (*world)->rank();
  const std::vector<Sample> samples = make_samples();
  std::vector<double> advantages;
  for (size_t i = 0; i < samples.size(); ++i) advantages.push_back(std::sin(1.0 + 3.0 * i));

  // The union batch on one model, on every rank.
  auto whole = make_model();
  const auto all = pointers(samples, 0, samples.size());
  auto union_layout = *response_layout(all);
  auto base = evaluate_policy(*whole, all, 3, 0);
  ASSERT_TRUE(base.ok());
  // "Old" log-probs shifted so that ratios leave the clip range on both sides.
  std::vector<double> old_lp = base->log_probs;
  for (size_t k = 0; k < old_lp.size(); ++k) old_lp[k] += 0.4 * std::sin(0.7 * k);
  auto loss_of = [&](const ResponseLayout& layout, std::span<const double> lp,
                     std::span<const double> old, std::span<const double> adv,
                     const AggregationScope& scope) {
    auto token_adv = broadcast_to_tokens(layout, adv);
    EXPECT_TRUE(token_adv.ok());
    auto r = clipped_policy_loss(layout, lp, old, *token_adv, PolicyClip{0.2, 0.28, 3.0}, scope);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return *r;
  };
  const AggregationScope one{GetParam(), 0, 0, 7.0, 1};
  const LossResult union_loss = loss_of(union_layout, base->log_probs, old_lp, advantages, one);
  ASSERT_TRUE(backward_policy(*whole, all, union_loss.gradient, 3, 0).ok());

  // This rank's share, reduced by the trainer's optimizer over dp.
  auto part_model = make_model();
  auto optimizer = train::DistributedOptimizer::create(**world, trainable(*part_model),
                                                       config::OptimConfig{}, {});
  ASSERT_TRUE(optimizer.ok());
  const size_t first = samples.size() * static_cast<size_t>(rank) / static_cast<size_t>(dp);
  const size_t last = samples.size() * static_cast<size_t>(rank + 1) / static_cast<size_t>(dp);
  const auto mine = pointers(samples, first, last);
  const ResponseLayout layout = *response_layout(mine);
  const size_t t0 = static_cast<size_t>(union_layout.begin(static_cast<int64_t>(first)));
  const size_t t1 = static_cast<size_t>(union_layout.begin(static_cast<int64_t>(last)));
  auto current = evaluate_policy(*part_model, mine, 3, 0);
  ASSERT_TRUE(current.ok());
  int64_t responses = 0;
  for (int64_t i = 0; i < union_layout.num_responses(); ++i) responses += union_layout.length(i) > 0;
  const AggregationScope shared{GetParam(), union_layout.num_tokens(), responses, 7.0, dp};
  const LossResult part =
      loss_of(layout, current->log_probs, std::span(old_lp).subspan(t0, t1 - t0),
              std::span(advantages).subspan(first, last - first), shared);
  (*optimizer)->begin_step();
  ASSERT_TRUE(backward_policy(*part_model, mine, part.gradient, 3, 0).ok());
  ASSERT_TRUE((*optimizer)->finish_reduction().ok());
  double checked = 0;
  for (size_t i = 0; i < whole->parameters().size(); ++i) {
    const auto& gu = whole->parameters()[i].grad;
    const auto& gr = part_model->parameters()[i].grad;  // the sum over ranks, after the reduction
    for (int64_t k = 0; k < gu.numel(); ++k) {
      const double want = gu.data<float>()[k];
      ASSERT_NEAR(gr.data<float>()[k] / dp, want, 1e-6 + 1e-4 * std::abs(want))
          << whole->parameters()[i].name << " [" << k << "] rank " << rank;
      checked += std::abs(want);
    }
  }
  EXPECT_GT(checked, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Modes, DataParallelInvariance,
                         ::testing::Values(LossAggregation::kTokenMean,
                                           LossAggregation::kSeqMeanTokenMean,
                                           LossAggregation::kSeqMeanTokenSumNorm));

}  // namespace
}  // namespace ms::rl
