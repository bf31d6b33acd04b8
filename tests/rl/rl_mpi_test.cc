// The actor's update path on a real model under mpirun (1 and 2 ranks):
//   - the token-weighted backward (Transformer::forward_backward_weighted) equals the plain
//     cross-entropy backward for uniform weights, and is linear in the weights;
//   - the hybrid engine: an engine built on the actor sees each optimizer update at once (its
//     logits move, and match the full forward of the updated model);
//   - data-parallel invariance: every rank holding part of the batch, with the global token and
//     response counts in the aggregation scope and the optimizer's sum over ranks divided by dp,
//     gives the gradient of one rank holding the union batch, in every aggregation mode;
//   - the critic (PPO/VAPO's value model): it starts from the actor's weights at value 0, its
//     gradient matches finite differences through the value head and the trunk, and its
//     clipped value loss over dp ranks equals one rank on the union batch;
//   - a tensor-parallel actor (tp = every rank): the whole weights its ranks gather in memory
//     for generation (rollout_weights.h) equal, bit for bit, what a checkpoint of its slices
//     loads whole, and its vocabulary-parallel log-probs and entropies equal the whole model's;
//   - split placement's hand-off of a step from the rollout ranks to every rank.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "ckpt/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "io/env.h"
#include "infer/engine.h"
#include "model/transformer.h"
#include "rl/actor.h"
#include "rl/advantage.h"
#include "rl/critic.h"
#include "rl/losses.h"
#include "rl/rollout_exchange.h"
#include "rl/rollout_weights.h"
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

// Rank `rank` of `dp`'s contiguous share of the samples: its pointers, their layout, and their
// range of the union batch's tokens.
struct RankShare {
  size_t first = 0, last = 0;  // samples
  std::vector<const Sample*> samples;
  ResponseLayout layout;
  size_t t0 = 0, t1 = 0;  // tokens of the union layout
};

RankShare rank_share(const std::vector<Sample>& samples, const ResponseLayout& union_layout,
                     int rank, int dp) {
  RankShare s;
  s.first = samples.size() * static_cast<size_t>(rank) / static_cast<size_t>(dp);
  s.last = samples.size() * static_cast<size_t>(rank + 1) / static_cast<size_t>(dp);
  s.samples = pointers(samples, s.first, s.last);
  s.layout = *response_layout(s.samples);
  s.t0 = static_cast<size_t>(union_layout.begin(static_cast<int64_t>(s.first)));
  s.t1 = static_cast<size_t>(union_layout.begin(static_cast<int64_t>(s.last)));
  return s;
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
  const RankShare share = rank_share(samples, union_layout, rank, dp);
  const auto& mine = share.samples;
  const size_t first = share.first, last = share.last, t0 = share.t0, t1 = share.t1;
  const ResponseLayout& layout = share.layout;
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

// A loss linear in the values, sum_t c_t v_t, so its gradient with respect to value t is c_t.
std::vector<double> value_weights(size_t n) {
  std::vector<double> c;
  for (size_t k = 0; k < n; ++k) c.push_back(std::cos(0.9 * static_cast<double>(k) + 0.3));
  return c;
}

double weighted_values(Critic& critic, std::span<const Sample* const> samples) {
  auto v = critic.values(samples, 3, 0);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  const std::vector<double> c = value_weights(v->size());
  double sum = 0;
  for (size_t k = 0; k < v->size(); ++k) sum += c[k] * (*v)[k];
  return sum;
}

model::Parameter& critic_parameter(Critic& critic, const std::string& name) {
  for (model::Parameter* p : critic.parameters()) {
    if (p->name == name) return *p;
  }
  ADD_FAILURE() << "no critic parameter " << name;
  return *critic.parameters().front();
}

std::vector<train::TrainableParam> trainable(Critic& critic) {
  std::vector<train::TrainableParam> params;
  for (model::Parameter* p : critic.parameters()) {
    if (p->trainable) params.push_back({p->name, &p->value, &p->grad, p->weight_decay, true, true});
  }
  return params;
}

TEST(Critic, StartsFromTheActorAtValueZero) {
  auto actor = make_model();
  auto critic = Critic::create(*actor);
  ASSERT_TRUE(critic.ok()) << critic.status().to_string();
  const std::vector<Sample> samples = make_samples();
  const auto all = pointers(samples, 0, samples.size());
  auto values = (*critic)->values(all, 3, 0);
  ASSERT_TRUE(values.ok());
  EXPECT_EQ(static_cast<int64_t>(values->size()), response_layout(all)->num_tokens());
  for (double v : *values) EXPECT_EQ(v, 0.0);
  for (model::Parameter* p : (*critic)->parameters()) {
    if (p->name.starts_with("value_head.score")) continue;
    const std::string from = p->name == "value_head.norm.weight" ? "model.norm.weight" : p->name;
    const model::Parameter& a = actor->parameters()[*actor->parameter_index(from)];
    ASSERT_EQ(a.value.numel(), p->value.numel()) << p->name;
    for (int64_t k = 0; k < a.value.numel(); ++k) {
      ASSERT_EQ(a.value.data<float>()[k], p->value.data<float>()[k]) << p->name;
    }
  }
  for (model::Parameter* p : (*critic)->parameters()) {
    EXPECT_NE(p->name, "lm_head.weight") << "the critic has no lm_head";
    EXPECT_NE(p->name, "model.norm.weight") << "the value head holds the final norm";
  }
}

TEST(Critic, GradientMatchesFiniteDifferences) {
  auto actor = make_model();
  auto made = Critic::create(*actor);
  ASSERT_TRUE(made.ok());
  Critic& critic = **made;
  // A head that is not zero, so the gradient reaches the trunk.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  model::Parameter& w = critic_parameter(critic, "value_head.score.weight");
  for (int64_t k = 0; k < w.value.numel(); ++k) w.value.data<float>()[k] = normal(rng);
  critic_parameter(critic, "value_head.score.bias").value.data<float>()[0] = 0.3f;
  const std::vector<Sample> samples = make_samples();
  const auto all = pointers(samples, 0, samples.size());
  auto values = critic.values(all, 3, 0);
  ASSERT_TRUE(values.ok());
  for (model::Parameter* p : critic.parameters()) p->grad.fill(0.0f);
  ASSERT_TRUE(critic.backward(all, value_weights(values->size()), 3, 0).ok());
  int checked = 0;
  for (const char* name : {"value_head.score.weight", "value_head.score.bias",
                           "value_head.norm.weight", "model.embed_tokens.weight",
                           "model.layers.0.self_attn.q_proj.weight",
                           "model.layers.0.mlp.down_proj.weight",
                           "model.layers.0.post_attention_layernorm.weight"}) {
    model::Parameter& p = critic_parameter(critic, name);
    for (int64_t k = 0; k < p.value.numel(); k += std::max<int64_t>(1, p.value.numel() / 6)) {
      float& x = p.value.data<float>()[k];
      const float saved = x;
      const float h = 1e-3f * std::max(1.0f, std::abs(saved));
      x = saved + h;
      const double up = weighted_values(critic, all);
      x = saved - h;
      const double down = weighted_values(critic, all);
      x = saved;
      const double numeric = (up - down) / (2.0 * h);
      const double analytic = p.grad.data<float>()[k];
      EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::abs(numeric)) << name << " [" << k << "]";
      checked += std::abs(numeric) > 1e-4;
    }
  }
  EXPECT_GT(checked, 20) << "too few elements with a gradient to check";
  // A gradient of the wrong length is refused.
  EXPECT_FALSE(critic.backward(all, std::vector<double>(3, 1.0), 3, 0).ok());
}

TEST(CriticDataParallel, RanksEqualTheUnionBatch) {
  auto world = comm::MpiCommunicator::world("dp");
  ASSERT_TRUE(world.ok());
  const int dp = (*world)->size();
  const int rank = (*world)->rank();
  const std::vector<Sample> samples = make_samples();
  auto actor = make_model();
  auto make_critic = [&] {
    auto c = Critic::create(*actor);
    EXPECT_TRUE(c.ok());
    model::Parameter& w = critic_parameter(**c, "value_head.score.weight");
    for (int64_t k = 0; k < w.value.numel(); ++k) w.value.data<float>()[k] = std::sin(1.0f + k);
    return std::move(*c);
  };
  const auto all = pointers(samples, 0, samples.size());
  const ResponseLayout union_layout = *response_layout(all);
  // Old values and returns that put some tokens outside the value clip on both sides.
  auto whole = make_critic();
  const std::vector<double> values = *whole->values(all, 3, 0);
  std::vector<double> old_values, returns;
  for (size_t k = 0; k < values.size(); ++k) {
    old_values.push_back(values[k] + 0.8 * std::sin(1.3 * k));
    returns.push_back(std::cos(0.5 * k));
  }
  const AggregationScope one{LossAggregation::kTokenMean, 0, 0, 7.0, 1};
  auto union_loss = value_loss(union_layout, values, old_values, returns, 0.5, one);
  ASSERT_TRUE(union_loss.ok());
  ASSERT_GT(union_loss->clip_fraction, 0.0);
  for (model::Parameter* p : whole->parameters()) p->grad.fill(0.0f);
  ASSERT_TRUE(whole->backward(all, union_loss->gradient, 3, 0).ok());

  auto part = make_critic();
  auto optimizer = train::DistributedOptimizer::create(**world, trainable(*part),
                                                       config::OptimConfig{}, {});
  ASSERT_TRUE(optimizer.ok());
  const RankShare share = rank_share(samples, union_layout, rank, dp);
  const auto& mine = share.samples;
  const size_t t0 = share.t0, t1 = share.t1;
  const ResponseLayout& layout = share.layout;
  const AggregationScope shared{LossAggregation::kTokenMean, union_layout.num_tokens(), 0, 7.0, dp};
  auto my_values = part->values(mine, 3, 0);
  ASSERT_TRUE(my_values.ok());
  auto loss = value_loss(layout, *my_values, std::span(old_values).subspan(t0, t1 - t0),
                         std::span(returns).subspan(t0, t1 - t0), 0.5, shared);
  ASSERT_TRUE(loss.ok());
  (*optimizer)->begin_step();
  ASSERT_TRUE(part->backward(mine, loss->gradient, 3, 0).ok());
  ASSERT_TRUE((*optimizer)->finish_reduction().ok());
  const auto wp = whole->parameters(), pp = part->parameters();
  double checked = 0;
  for (size_t i = 0; i < wp.size(); ++i) {
    for (int64_t k = 0; k < wp[i]->grad.numel(); ++k) {
      const double want = wp[i]->grad.data<float>()[k];
      ASSERT_NEAR(pp[i]->grad.data<float>()[k] / dp, want, 1e-6 + 1e-4 * std::abs(want))
          << wp[i]->name << " [" << k << "] rank " << rank;
      checked += std::abs(want);
    }
  }
  EXPECT_GT(checked, 0.0);
}

// The gathered whole weights against the checkpoint path (the Checkpointer writes each rank's
// slices, load_tensors reads them whole), after moving every value off its initialization so
// that a slice put in the wrong place shows; and the tp actor's log-probs against the whole
// model's on the same samples. The vocabulary (61) leaves the last rank a short slice.
TEST(TensorParallelActor, GatheredWeightsEqualTheCheckpointAndLogProbsTheWholeModel) {
  auto world = comm::MpiCommunicator::world("tp");
  ASSERT_TRUE(world.ok());
  comm::Communicator& tp = **world;
  config::ModelConfig cfg = tiny();
  cfg.vocab_size = 61;
  cfg.n_kv_heads = 2;
  model::ModelParallel parallel;
  parallel.tp = &tp;
  parallel.sequence_parallel = false;
  auto actor = model::Transformer::create(cfg, 7, parallel);
  ASSERT_TRUE(actor.ok()) << actor.status().to_string();
  for (model::Parameter& p : (*actor)->parameters()) {
    // A function of the global element index, so replicated tensors stay equal across ranks.
    const std::vector<int64_t>& offsets = p.shard.offsets();
    const std::vector<int64_t>& lengths = p.shard.lengths();
    const int64_t cols = p.global_shape.size() == 2 ? p.global_shape[1] : 1;
    const int64_t local_cols = lengths.size() == 2 ? lengths[1] : 1;
    float* v = p.value.data<float>();
    for (int64_t k = 0; k < p.value.numel(); ++k) {
      const int64_t row = (offsets.empty() ? 0 : offsets[0]) + k / local_cols;
      const int64_t col = (offsets.size() == 2 ? offsets[1] : 0) + k % local_cols;
      v[k] += 1e-3f * std::sin(static_cast<float>(row * cols + col));
    }
  }
  auto whole = model::Transformer::create(cfg, 7, {}, model::ParameterValues::kToLoad);
  ASSERT_TRUE(whole.ok());
  auto report =
      gather_whole_weights(tp, tp.size(), &(*actor)->parameters(), &(*whole)->parameters());
  ASSERT_TRUE(report.ok()) << report.status().to_string();
  EXPECT_EQ(report->bytes_received > 0, tp.size() > 1);

  char path[512] = {};
  if (tp.rank() == 0) {
    const std::filesystem::path p = std::filesystem::temp_directory_path() /
                                    ("ms_rl_reshard_" + std::to_string(::getpid()));
    std::filesystem::remove_all(p);
    std::snprintf(path, sizeof path, "%s", p.c_str());
  }
  ASSERT_TRUE(tp.broadcast(path, sizeof path, DType::kU8, 0).ok());
  std::vector<ckpt::SaveTensor> tensors;
  for (const model::Parameter& p : (*actor)->parameters()) {
    tensors.push_back({p.name, DType::kF32, p.shard, p.value.raw_data(), false});
  }
  ckpt::SaveRequest request;
  request.checkpoints_dir = path;
  request.step = 1;
  request.layout = {tp.size(), 1, tp.size(), 1, 1, 0};
  request.config_yaml = "run: {}\n";
  request.async = false;
  ckpt::Checkpointer checkpointer(tp);
  ASSERT_TRUE(checkpointer.save(tensors, request).ok());
  ASSERT_TRUE(checkpointer.finish().ok());
  const std::string step_dir = checkpointer.last_report()->step_dir;
  auto manifest = ckpt::Manifest::read(step_dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status().to_string();
  for (const model::Parameter& p : (*whole)->parameters()) {
    std::vector<float> loaded(static_cast<size_t>(p.value.numel()));
    const ckpt::LoadTensor t{p.name, DType::kF32, comm::ShardSpec::replicated(p.global_shape),
                             loaded.data()};
    ASSERT_TRUE(ckpt::load_tensors(step_dir, *manifest, std::span(&t, 1), {}, io::default_env())
                    .ok());
    EXPECT_EQ(0, std::memcmp(loaded.data(), p.value.data<float>(), loaded.size() * sizeof(float)))
        << p.name << " gathered differs from the checkpoint";
  }
  ASSERT_TRUE(tp.barrier().ok());
  if (tp.rank() == 0) std::filesystem::remove_all(path);

  std::vector<Sample> samples = make_samples();
  for (Sample& x : samples) {
    for (int32_t& t : x.prompt) t %= 61;
    for (int32_t& t : x.response) t %= 61;
  }
  const auto all = pointers(samples, 0, samples.size());
  auto sliced = evaluate_policy(**actor, all, 3, 0);
  auto reference = evaluate_policy(**whole, all, 3, 0);
  ASSERT_TRUE(sliced.ok()) << sliced.status().to_string();
  ASSERT_TRUE(reference.ok());
  ASSERT_EQ(sliced->log_probs.size(), reference->log_probs.size());
  for (size_t k = 0; k < sliced->log_probs.size(); ++k) {
    EXPECT_NEAR(sliced->log_probs[k], reference->log_probs[k], 1e-5) << "token " << k;
    EXPECT_NEAR(sliced->entropy[k], reference->entropy[k], 1e-5) << "token " << k;
  }
}

// Split placement's hand-off (rollout_exchange.h): the last rank is the first rollout rank and
// sends the step; every rank gets its kept groups, figures and prompt position, and the groups
// of each round pooled in rank order with their behavior log-probs, which the trainer's share
// collects in the batch's order. A rollout-side error reaches every rank unchanged.
TEST(SplitHandOff, TheRolloutRanksStepReachesEveryRank) {
  auto world = comm::MpiCommunicator::world("world");
  ASSERT_TRUE(world.ok());
  const int ranks = (*world)->size();
  const int source = ranks - 1;
  const auto rollout = [](int32_t id) {
    Rollout r;
    r.sample.prompt = {1, 2, id};
    r.sample.response = {id, id + 1};
    r.text = "t" + std::to_string(id);
    r.reward = id * 0.5;
    r.correct = id % 2 == 0;
    r.behavior.log_probs = {-1.0 * id, -2.0 * id};
    r.behavior.entropy = {1.0 * id, 2.0 * id};
    return r;
  };
  StepRollouts mine;
  if ((*world)->rank() == source) {
    mine.step = 7;
    mine.weight_version = 5;
    // Round 0: groups at positions 0 and 1 (rollouts 10, 11 and 12, 13); round 1: one group.
    mine.rounds = {{{rollout(10), rollout(11)}, {rollout(12), rollout(13)}},
                   {{rollout(20), rollout(21)}}};
    mine.batch.kept = {{1, 0}, {0, 1}};
    mine.batch.dropped = 1;
    mine.batch.rounds = 2;
    mine.metrics.mean_reward = 0.375;
    mine.metrics.response_tokens = 8;
    mine.stream_after = PromptStream::shuffled(9, 3);
    mine.stream_after.next(4);
  }
  Result<StepRollouts> got = hand_off_step_rollouts(**world, source, mine);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->step, 7);
  EXPECT_EQ(got->weight_version, 5);
  ASSERT_EQ(got->rounds.size(), 2u);
  ASSERT_EQ(got->rounds[0].size(), 2u);
  EXPECT_EQ(got->rounds[1][0][1].text, "t21");
  EXPECT_EQ(got->rounds[0][1][0].sample.response, (std::vector<int32_t>{12, 13}));
  EXPECT_TRUE(got->rounds[0][1][0].correct);
  ASSERT_EQ(got->batch.kept.size(), 2u);
  EXPECT_EQ(got->batch.kept[0].round, 1);
  EXPECT_EQ(got->batch.dropped, 1);
  EXPECT_EQ(got->metrics.mean_reward, 0.375);
  PromptStream expected = PromptStream::shuffled(9, 3);
  expected.next(4);
  EXPECT_EQ(got->stream_after.encode(), expected.encode());
  // One trainer of the whole round: the kept groups in the batch's order, their log-probs
  // concatenated the same way.
  keep_trained_share(*got, 0, 2, 0);
  collect_behavior(*got);
  ASSERT_EQ(got->kept.size(), 4u);
  EXPECT_EQ(got->kept[0]->text, "t20");
  EXPECT_EQ(got->kept[2]->text, "t12");
  EXPECT_EQ(got->behavior.log_probs,
            (std::vector<double>{-20, -40, -21, -42, -12, -24, -13, -26}));
  EXPECT_EQ(got->before, (std::vector<size_t>{0, 1, 2}));

  const Result<StepRollouts> failed =
      (*world)->rank() == source ? Result<StepRollouts>(InvalidArgument("reward program 'x' exited"))
                                 : Result<StepRollouts>(StepRollouts{});
  Result<StepRollouts> error = hand_off_step_rollouts(**world, source, failed);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(error.status().message(), "reward program 'x' exited");
}

}  // namespace
}  // namespace ms::rl
