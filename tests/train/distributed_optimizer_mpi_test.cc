// The distributed optimizer against a single-process reference: plain data parallelism and
// ZeRO-1, with and without overlap, AdamW and LAMB, small and large buckets. Each rank feeds
// deterministic per-rank gradients for a synthetic model of plain parameter vectors; the
// reference averages every rank's gradients itself (it can compute them all) and runs the
// single-process optimizer. After every step every rank's parameters must match within 1e-6.
#include "train/distributed_optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "comm/mpi_communicator.h"
#include "ops/reduce.h"
#include "train/grad_clip.h"

namespace ms::train {
namespace {

const std::vector<int64_t> kSizes = {37, 5, 128, 1, 64, 300};

float initial_value(size_t p, int64_t e) {
  return 0.5f * static_cast<float>(std::sin(0.1 * static_cast<double>(p * 1000 + e)));
}

float rank_grad(size_t p, int64_t e, int rank, int step) {
  return static_cast<float>(std::cos(0.37 * static_cast<double>(e + 1) + 0.5 * rank + 1.3 * step +
                                     static_cast<double>(p)) *
                            (1.0 + 0.1 * static_cast<double>(p)));
}

struct Model {
  std::vector<Tensor> values, grads;
  std::vector<TrainableParam> trainable() {
    std::vector<TrainableParam> out;
    for (size_t p = 0; p < values.size(); ++p) {
      out.push_back({"p" + std::to_string(p), &values[p], &grads[p], p % 2 == 0});
    }
    return out;
  }
};

Model make_model() {
  Model m;
  for (size_t p = 0; p < kSizes.size(); ++p) {
    m.values.push_back(Tensor::empty(DType::kF32, {kSizes[p]}));
    m.grads.push_back(Tensor::zeros(DType::kF32, {kSizes[p]}));
    for (int64_t e = 0; e < kSizes[p]; ++e) m.values[p].data<float>()[e] = initial_value(p, e);
  }
  return m;
}

config::OptimConfig optim_config(config::OptimizerKind kind) {
  config::OptimConfig c;
  c.name = kind;
  c.weight_decay = 0.1;
  c.grad_clip = 5.0;  // the synthetic gradients' norm is about 9, so clipping is exercised
  return c;
}

// The single-process update: parameters back to back, gradients averaged over `dp` ranks.
struct Reference {
  std::vector<float> values, grads;
  std::vector<OptimSegment> segments;
  std::unique_ptr<Optimizer> optimizer;
  double last_norm = 0;

  Reference(const config::OptimConfig& c, int dp) : dp_(dp) {
    int64_t offset = 0;
    for (size_t p = 0; p < kSizes.size(); ++p) {
      segments.push_back({p, offset, kSizes[p], p % 2 == 0});
      for (int64_t e = 0; e < kSizes[p]; ++e) values.push_back(initial_value(p, e));
      offset += kSizes[p];
    }
    grads.resize(values.size());
    Result<std::unique_ptr<Optimizer>> created = Optimizer::create(c, offset, kSizes.size());
    EXPECT_TRUE(created.ok());
    optimizer = std::move(*created);
  }

  void step(int step, double lr, double max_norm) {
    for (const OptimSegment& s : segments) {
      for (int64_t e = 0; e < s.length; ++e) {
        double sum = 0;
        for (int r = 0; r < dp_; ++r) sum += rank_grad(s.param, e, r, step);
        grads[s.offset + e] = static_cast<float>(sum / dp_);
      }
    }
    last_norm = std::sqrt(ops::sum_of_squares_f64(grads.data(), grads.size()));
    const OptimStep hyper{lr, clip_coefficient(last_norm, max_norm)};
    ASSERT_TRUE(optimizer->step(values, grads, segments, hyper,
                                [](std::span<double>) { return Status::OK(); }).ok());
  }

 private:
  int dp_;
};

// Simulates backward on this rank: gradients appear in reverse parameter order.
void backward(Model& m, DistributedOptimizer& dist, int rank, int step) {
  dist.begin_step();
  dist.arm();
  for (size_t k = 0; k < m.grads.size(); ++k) {
    const size_t p = m.grads.size() - 1 - k;
    float* g = m.grads[p].data<float>();
    for (int64_t e = 0; e < kSizes[p]; ++e) g[e] += rank_grad(p, e, rank, step);
    dist.on_grad_ready(p);
    dist.poll();
  }
}

using Case = std::tuple<bool, config::OptimizerKind, bool, int64_t>;

class DistributedOptimizerTest : public ::testing::TestWithParam<Case> {};

TEST_P(DistributedOptimizerTest, MatchesTheSingleProcessUpdate) {
  const auto [zero, kind, overlap, bucket_bytes] = GetParam();
  auto world = comm::MpiCommunicator::world("dp");
  ASSERT_TRUE(world.ok());
  comm::Communicator& dp = **world;
  const config::OptimConfig optim = optim_config(kind);
  Model model = make_model();
  std::vector<CommEvent> events;
  DistributedOptimizerOptions options{zero, overlap, bucket_bytes,
                                      [&events](const CommEvent& e) { events.push_back(e); }};
  auto dist = DistributedOptimizer::create(dp, model.trainable(), optim, options);
  ASSERT_TRUE(dist.ok()) << dist.status().to_string();
  Reference reference(optim, dp.size());
  for (int step = 1; step <= 3; ++step) {
    backward(model, **dist, dp.rank(), step);
    ASSERT_TRUE((*dist)->finish_reduction().ok());
    Result<double> norm = (*dist)->grad_norm();
    ASSERT_TRUE(norm.ok());
    ASSERT_TRUE((*dist)->apply(1e-2, clip_coefficient(*norm, optim.grad_clip)).ok());
    reference.step(step, 1e-2, optim.grad_clip);
    EXPECT_NEAR(*norm, reference.last_norm, 1e-6 * reference.last_norm);
    for (const OptimSegment& s : reference.segments) {
      const float* got = model.values[s.param].data<float>();
      for (int64_t e = 0; e < s.length; ++e) {
        ASSERT_NEAR(got[e], reference.values[s.offset + e], 1e-6)
            << "step " << step << " param " << s.param << " element " << e;
      }
    }
  }
  const size_t buckets = (*dist)->layout().buckets().size();
  EXPECT_EQ(events.size(), 3 * buckets * (zero ? 2 : 1));
  EXPECT_STREQ(events.front().op, zero ? "reduce_scatter" : "allreduce");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const auto [zero, kind, overlap, bucket_bytes] = info.param;
  return std::string(zero ? "Zero1" : "Replicated") +
         (kind == config::OptimizerKind::kLamb ? "Lamb" : "AdamW") +
         (overlap ? "Overlapped" : "AfterBackward") +
         (bucket_bytes < 1024 ? "SmallBuckets" : "OneBucket");
}

INSTANTIATE_TEST_SUITE_P(
    Modes, DistributedOptimizerTest,
    ::testing::Combine(::testing::Bool(),
                       ::testing::Values(config::OptimizerKind::kAdamW,
                                         config::OptimizerKind::kLamb),
                       ::testing::Bool(), ::testing::Values(int64_t{256}, int64_t{1} << 20)),
    case_name);

TEST(DistributedOptimizer, ModelTensorsBecomeViewsOfTheFlatBuffers) {
  auto world = comm::MpiCommunicator::world("dp");
  ASSERT_TRUE(world.ok());
  Model model = make_model();
  auto dist = DistributedOptimizer::create(**world, model.trainable(),
                                           optim_config(config::OptimizerKind::kAdamW), {});
  ASSERT_TRUE(dist.ok());
  const FlatLayout& layout = (*dist)->layout();
  for (size_t p = 0; p < kSizes.size(); ++p) {
    EXPECT_FALSE(model.values[p].owns_data());
    EXPECT_EQ(model.values[p].data<float>(),
              (*dist)->flat_values().data() + layout.param_offset(p));
    EXPECT_EQ(model.values[p].data<float>()[0], initial_value(p, 0));
  }
}

TEST(DistributedOptimizer, RefusesANonFloatParameter) {
  auto world = comm::MpiCommunicator::world("dp");
  ASSERT_TRUE(world.ok());
  Tensor value = Tensor::zeros(DType::kBF16, {4});
  Tensor grad = Tensor::zeros(DType::kF32, {4});
  std::vector<TrainableParam> params = {{"embed.weight", &value, &grad, true}};
  auto dist = DistributedOptimizer::create(**world, params,
                                           optim_config(config::OptimizerKind::kAdamW), {});
  ASSERT_FALSE(dist.ok());
  EXPECT_NE(dist.status().message().find("embed.weight"), std::string::npos);
}

}  // namespace
}  // namespace ms::train
