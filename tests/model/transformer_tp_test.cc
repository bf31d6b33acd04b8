// Tensor parallelism of the whole model, specified by equivalence with the single-process
// model: for every tp in {2, 4} that divides the world (consecutive ranks form a tp group, as
// in the Mesh), over dense (tied and untied), grouped-query, MoE with a shared expert, the
// parallel block, a sliding window, document masking (with per-document positions, a window,
// grouped-query heads) and a vocabulary tp does not divide (padded), with
// sequence parallelism on and off and every parallel.recompute mode:
//   - the loss and every global gradient assembled from the tp shards at step 0 are within
//     1e-5 (relative to the tensor's scale) of the single-process model's;
//   - five SGD steps on the shards keep the losses within 1e-5 relative;
//   - the same layout twice is bitwise identical;
//   - a layout the model cannot split is refused at create() naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "config/run_config.h"
#include "core/philox.h"
#include "model/transformer.h"

namespace ms::model {
namespace {

using config::ModelConfig;
using config::Recompute;

struct Case {
  std::string name;
  ModelConfig model;
  DocumentMask docs = {};
};

constexpr int32_t kEod = 1;

ModelConfig base_model() {
  ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.d_ff = 48;
  c.max_seq_len = 16;
  c.tie_embeddings = false;
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  out.push_back({"dense_untied", base_model()});
  ModelConfig tied = base_model();
  tied.tie_embeddings = true;
  tied.vocab_size = 250;  // tp = 4 pads it to 252: rank 3 holds 61 real ids and 2 padded
  out.push_back({"dense_tied_padded_vocab", tied});
  ModelConfig gqa = base_model();
  gqa.n_heads = 8;
  gqa.n_kv_heads = 4;
  gqa.d_model = 48;
  out.push_back({"grouped_query", gqa});
  ModelConfig moe = base_model();
  moe.moe.num_experts = 4;
  moe.moe.top_k = 2;
  moe.moe.shared_expert_d_ff = 24;
  moe.moe.aux_loss_coef = 0.05;
  out.push_back({"moe_shared_expert", moe});
  ModelConfig block = base_model();
  block.parallel_block = true;
  block.vocab_size = 61;  // prime: every tp pads it
  out.push_back({"parallel_block", block});
  ModelConfig window = base_model();
  window.sliding_window = 3;
  window.tie_embeddings = true;
  out.push_back({"sliding_window", window});
  out.push_back({"document_mask_window_positions", window, {true, true, kEod}});
  out.push_back({"document_mask_grouped_query", gqa, {true, false, kEod}});
  return out;
}

constexpr int64_t kB = 2, kT = 8;

struct Batch {
  std::vector<int32_t> inputs, targets;
};

// With document masking, rows end documents at a few positions that move with the step.
Batch make_batch(int64_t vocab, int step, const DocumentMask& docs = {}) {
  Batch b;
  for (int64_t i = 0; i < kB * kT; ++i) {
    const uint64_t index = static_cast<uint64_t>(step * 1000 + i);
    b.inputs.push_back(static_cast<int32_t>(uniform(7, stream_id("inputs"), index) * vocab) %
                       static_cast<int32_t>(vocab));
    b.targets.push_back(static_cast<int32_t>(uniform(7, stream_id("targets"), index) * vocab) %
                        static_cast<int32_t>(vocab));
  }
  if (docs.enabled) {
    for (int64_t at : {int64_t{step % 3 + 1}, int64_t{5}, kT + int64_t{step % 4 + 2}}) {
      b.inputs[static_cast<size_t>(at)] = docs.eod_id;
    }
  }
  return b;
}

// The global tensor a parameter's shards make up: each tp rank writes its box, replicated
// tensors come from tp rank 0 (and must be identical on every rank), summed over tp.
std::vector<float> assemble(comm::Communicator& tp, const Parameter& p, const Tensor& local) {
  const comm::ShardSpec& s = p.shard;
  std::vector<float> global(static_cast<size_t>(s.global_numel()), 0.0f);
  const float* src = local.data<float>();
  if (s.is_replicated()) {
    if (tp.rank() == 0) std::copy(src, src + s.numel(), global.begin());
  } else {
    const int64_t cols = s.global_shape()[1];
    for (int64_t r = 0; r < s.lengths()[0]; ++r) {
      std::copy_n(src + r * s.lengths()[1], s.lengths()[1],
                  global.begin() + (s.offsets()[0] + r) * cols + s.offsets()[1]);
    }
  }
  EXPECT_TRUE(tp.allreduce(global.data(), global.data(), global.size(), DType::kF32,
                           comm::ReduceOp::kSum)
                  .ok());
  return global;
}

void expect_close(const std::vector<float>& got, const float* want, const std::string& what) {
  float scale = 0;
  for (size_t i = 0; i < got.size(); ++i) scale = std::max(scale, std::fabs(want[i]));
  const float tol = 1e-5f * std::max(scale, 1e-30f);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - want[i]), tol)
        << what << " element " << i << ": got " << got[i] << ", want " << want[i];
  }
}

void expect_loss_close(double got, double want, const std::string& what) {
  EXPECT_LE(std::fabs(got - want), 1e-5 * std::fabs(want)) << what << ": " << got << " vs " << want;
}

// One SGD step on whatever each rank holds: the same update as on the whole tensor.
void sgd(Transformer& m, float lr) {
  for (Parameter& p : m.parameters()) {
    float* v = p.value.data<float>();
    const float* g = p.grad.data<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) v[i] -= lr * g[i];
  }
  m.zero_grads();
}

class TransformerTp : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = comm::MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
  }
  std::unique_ptr<comm::Communicator> group(int tp) {
    auto g = world_->split(world_->rank() / tp, world_->rank(), "tp");
    EXPECT_TRUE(g.ok());
    return std::move(g).value();
  }
  std::vector<int> tp_sizes() const {
    std::vector<int> out;
    for (int tp : {2, 4}) {
      if (world_->size() % tp == 0) out.push_back(tp);
    }
    return out;
  }
  std::unique_ptr<comm::MpiCommunicator> world_;
};

std::string recompute_name(Recompute r) {
  return r == Recompute::kNone ? "none" : r == Recompute::kSelective ? "selective" : "full";
}

TEST_F(TransformerTp, EqualsTheSingleProcessModel) {
  for (const Case& c : cases()) {
    auto ref = Transformer::create(c.model, 11);
    ASSERT_TRUE(ref.ok()) << ref.status().to_string();
    ASSERT_TRUE((*ref)->set_document_mask(c.docs).ok());
    std::vector<double> ref_losses;
    std::vector<std::vector<float>> ref_grads;
    for (int step = 0; step < 5; ++step) {
      const Batch b = make_batch(c.model.vocab_size, step, c.docs);
      auto loss = (*ref)->forward_backward(b.inputs.data(), b.targets.data(), kB, kT, 1.0f);
      ASSERT_TRUE(loss.ok());
      ref_losses.push_back(loss->loss + c.model.moe.aux_loss_coef * loss->aux_loss);
      if (step == 0) {
        for (const Parameter& p : (*ref)->parameters()) {
          ref_grads.emplace_back(p.grad.data<float>(), p.grad.data<float>() + p.grad.numel());
        }
      }
      sgd(**ref, 0.5f);
    }
    for (int tp : tp_sizes()) {
      auto tp_comm = group(tp);
      for (bool sp : {true, false}) {
        for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
          const std::string what = c.name + " tp " + std::to_string(tp) + " sp " +
                                   std::to_string(sp) + " recompute " + recompute_name(rc) +
                                   (rc == Recompute::kSelective ? " chunks 3" : "");
          // Chunked overlap in one recompute mode of each, so every path runs both ways.
          const int chunks = rc == Recompute::kSelective ? 3 : 1;
          auto m = Transformer::create(c.model, 11, {tp_comm.get(), sp, rc, chunks, {}, {}, nullptr, false});
          ASSERT_TRUE(m.ok()) << what << ": " << m.status().to_string();
          ASSERT_TRUE((*m)->set_document_mask(c.docs).ok());
          for (int step = 0; step < 5; ++step) {
            const Batch b = make_batch(c.model.vocab_size, step, c.docs);
            auto loss = (*m)->forward_backward(b.inputs.data(), b.targets.data(), kB, kT, 1.0f);
            ASSERT_TRUE(loss.ok()) << what << ": " << loss.status().to_string();
            expect_loss_close(loss->loss + c.model.moe.aux_loss_coef * loss->aux_loss,
                              ref_losses[static_cast<size_t>(step)],
                              what + " step " + std::to_string(step));
            if (step == 0) {
              const auto& params = (*m)->parameters();
              ASSERT_EQ(params.size(), ref_grads.size());
              for (size_t i = 0; i < params.size(); ++i) {
                const std::vector<float> got = assemble(*tp_comm, params[i], params[i].grad);
                expect_close(got, ref_grads[i].data(), what + " grad " + params[i].name);
                if (HasFatalFailure()) return;
              }
            }
            sgd(**m, 0.5f);
          }
        }
      }
    }
  }
}

TEST_F(TransformerTp, InitializesTheSlicesOfTheSameModel) {
  const ModelConfig c = cases()[1].model;
  auto ref = Transformer::create(c, 5);
  ASSERT_TRUE(ref.ok());
  for (int tp : tp_sizes()) {
    auto tp_comm = group(tp);
    auto m = Transformer::create(c, 5, {tp_comm.get(), true, Recompute::kNone, 1, {}, {}, nullptr, false});
    ASSERT_TRUE(m.ok());
    for (size_t i = 0; i < (*m)->parameters().size(); ++i) {
      const Parameter& p = (*m)->parameters()[i];
      const std::vector<float> got = assemble(*tp_comm, p, p.value);
      const Tensor& want = (*ref)->parameters()[i].value;
      ASSERT_EQ(got.size(), static_cast<size_t>(want.numel()));
      EXPECT_EQ(std::memcmp(got.data(), want.data<float>(), got.size() * sizeof(float)), 0)
          << p.name << " at tp " << tp;
    }
  }
}

TEST_F(TransformerTp, SameLayoutTwiceIsBitwiseIdentical) {
  const ModelConfig c = cases()[3].model;  // MoE: routing ties would show
  for (int tp : tp_sizes()) {
    auto tp_comm = group(tp);
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 2; ++run) {
      auto m = Transformer::create(c, 3, {tp_comm.get(), true, Recompute::kSelective, 4, {}, {}, nullptr, false});
      ASSERT_TRUE(m.ok());
      for (int step = 0; step < 3; ++step) {
        const Batch b = make_batch(c.vocab_size, step);
        ASSERT_TRUE((*m)->forward_backward(b.inputs.data(), b.targets.data(), kB, kT, 1.0f).ok());
        sgd(**m, 0.5f);
      }
      size_t i = 0;
      for (const Parameter& p : (*m)->parameters()) {
        std::vector<float> v(p.value.data<float>(), p.value.data<float>() + p.value.numel());
        if (run == 0) {
          first.push_back(std::move(v));
        } else {
          EXPECT_EQ(std::memcmp(v.data(), first[i].data(), v.size() * sizeof(float)), 0) << p.name;
        }
        ++i;
      }
    }
  }
}

TEST_F(TransformerTp, ChunkedOverlapIsCountedTracedAndChangesNothing) {
  const ModelConfig c = cases()[4].model;  // the parallel block: both branches in one reduction
  for (int tp : tp_sizes()) {
    auto tp_comm = group(tp);
    double losses[2] = {0, 0};
    int64_t events[2] = {0, 0};
    for (int chunks : {1, 4}) {
      const size_t run = chunks == 1 ? 0 : 1;
      ModelParallel par{tp_comm.get(), true, Recompute::kNone, chunks, {}, {}, nullptr, false};
      par.on_comm = [&](const char*, uint64_t bytes, double t0, double t1) {
        EXPECT_GT(bytes, 0u);
        EXPECT_LE(t0, t1);
        ++events[run];
      };
      auto m = Transformer::create(c, 9, par);
      ASSERT_TRUE(m.ok());
      const Batch b = make_batch(c.vocab_size, 0);
      auto loss = (*m)->forward_backward(b.inputs.data(), b.targets.data(), kB, kT, 1.0f);
      ASSERT_TRUE(loss.ok());
      losses[run] = loss->loss;
      const parallel::CommStats stats = (*m)->take_tp_comm_stats();
      EXPECT_EQ(stats.collectives, events[run]);
      EXPECT_GT(stats.bytes, 0u);
      EXPECT_EQ((*m)->take_tp_comm_stats().collectives, 0) << "taking the stats resets them";
    }
    expect_loss_close(losses[1], losses[0], "chunks 4 vs 1 at tp " + std::to_string(tp));
    EXPECT_GT(events[1], events[0]) << "chunking issues more, smaller collectives";
  }
}

TEST_F(TransformerTp, RefusesLayoutsItCannotSplitNamingTheKey) {
  for (int tp : tp_sizes()) {
    auto tp_comm = group(tp);
    ModelConfig c = base_model();
    c.n_heads = 6;  // tp 4 does not divide the heads, tp 2 not the 3 key/value heads
    c.n_kv_heads = 3;
    c.d_model = 36;
    auto m = Transformer::create(c, 1, {tp_comm.get(), true, Recompute::kNone, 1, {}, {}, nullptr, false});
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(tp == 4 ? "model.n_heads" : "model.n_kv_heads"),
              std::string::npos)
        << m.status().message();
    c = base_model();
    c.d_ff = 45;
    m = Transformer::create(c, 1, {tp_comm.get(), true, Recompute::kNone, 1, {}, {}, nullptr, false});
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find("model.d_ff"), std::string::npos) << m.status().message();
    // Sequence parallelism splits the B*T tokens: 3 x 5 over tp is refused, naming the rule.
    m = Transformer::create(base_model(), 1, {tp_comm.get(), true, Recompute::kNone, 1, {}, {}, nullptr, false});
    ASSERT_TRUE(m.ok());
    std::vector<int32_t> ids(15, 1);
    auto loss = (*m)->forward_backward(ids.data(), ids.data(), 3, 5, 1.0f);
    ASSERT_FALSE(loss.ok());
    EXPECT_NE(loss.status().message().find("sequence parallelism"), std::string::npos);
  }
}

}  // namespace
}  // namespace ms::model
