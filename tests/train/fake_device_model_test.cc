// The model on the guarded fake device (fake_device.h): parameters moved into fake device
// memory the way the distributed optimizer moves them, then forward_backward on the fake and on
// the host give bitwise-equal losses and gradients. Any host read or write of the device
// memory on the way (outside the backend's ops and the runtime's copies) kills the test with
// SIGSEGV, and any op handed a host array where the seam wants a device one aborts naming it.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/device_runtime.h"
#include "fake_device.h"
#include "model/transformer.h"
#include "ops/device_array.h"

namespace ms::test {
namespace {

config::ModelConfig tiny_dense() {
  config::ModelConfig c;
  c.vocab_size = 29;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.d_ff = 24;
  c.max_seq_len = 16;
  c.rope_theta = 100.0;
  return c;
}

config::ModelConfig tiny_moe() {
  config::ModelConfig c = tiny_dense();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.aux_loss_coef = 0.05;
  c.moe.z_loss_coef = 0.01;
  c.moe.shared_expert_d_ff = 12;
  c.moe.expert_bias = true;
  c.d_ff = 12;
  return c;
}

// The parameters' values and gradients moved into device memory (as
// DistributedOptimizer::adopt does): the model's tensors then point there.
void move_to_device(model::Transformer& m, ops::Backend& be, std::vector<Buffer>& keep) {
  for (model::Parameter& p : m.parameters()) {
    for (Tensor* t : {&p.value, &p.grad}) {
      if (t->numel() == 0) continue;
      Result<Buffer> block = be.runtime().allocator().allocate(t->nbytes(), be.stream());
      ASSERT_TRUE(block.ok()) << block.status().to_string();
      Tensor on_device = Tensor::view_of(DType::kF32, t->shape(), block->data(), be.device());
      ASSERT_TRUE(be.runtime().copy(on_device, *t, be.stream()).ok()) << p.name;
      *t = std::move(on_device);
      keep.push_back(std::move(*block));
    }
  }
}

// A tensor's values on the host, wherever it lives.
std::vector<float> host_values(const Tensor& t, ops::Backend& be) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  Tensor to = Tensor::view_of(DType::kF32, t.shape(), out.data());
  EXPECT_TRUE(be.runtime().copy(to, t, be.stream()).ok());
  EXPECT_TRUE(be.runtime().synchronize(be.stream()).ok());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  std::string name;
  config::ModelConfig config;
  model::ModelParallel parallel;
  model::DocumentMask documents;
};

std::vector<Case> cases() {
  model::ModelParallel full;
  full.recompute = config::Recompute::kFull;
  model::ModelParallel selective;
  selective.recompute = config::Recompute::kSelective;
  const model::DocumentMask docs{true, true, 3};
  config::ModelConfig tied_parallel = tiny_dense();
  tied_parallel.tie_embeddings = true;
  tied_parallel.parallel_block = true;
  config::ModelConfig window = tiny_dense();
  window.sliding_window = 3;
  config::ModelConfig capacity = tiny_moe();
  capacity.moe.capacity_factor = 1.0;
  return {{"dense", tiny_dense(), {}, {}},
          {"tied_parallel_block", tied_parallel, {}, {}},
          {"sliding_window", window, {}, {}},
          {"moe_capacity", capacity, {}, {}},
          {"moe", tiny_moe(), {}, {}},
          {"dense_documents", tiny_dense(), {}, docs},
          {"moe_documents_full_recompute", tiny_moe(), full, docs},
          {"dense_selective_recompute", tiny_dense(), selective, {}}};
}

class FakeDeviceModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(FakeDeviceModelTest, ForwardBackwardEqualsTheHostBitwise) {
  const Case& c = GetParam();
  ops::Backend& fake = FakeDevice::get().backend();
  model::ModelParallel on_fake = c.parallel;
  on_fake.backend = &fake;
  Result<std::unique_ptr<model::Transformer>> host =
      model::Transformer::create(c.config, 11, c.parallel);
  Result<std::unique_ptr<model::Transformer>> dev =
      model::Transformer::create(c.config, 11, on_fake);
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  ASSERT_TRUE(dev.ok()) << dev.status().to_string();
  if (c.documents.enabled) {
    ASSERT_TRUE((*host)->set_document_mask(c.documents).ok());
    ASSERT_TRUE((*dev)->set_document_mask(c.documents).ok());
  }
  std::vector<Buffer> device_blocks;
  move_to_device(**dev, fake, device_blocks);
  ASSERT_FALSE(HasFatalFailure());

  const int64_t B = 2, T = 12;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int64_t i = 0; i < B * T; ++i) {
    inputs[i] = static_cast<int32_t>((7 * i + 2) % c.config.vocab_size);
    targets[i] = static_cast<int32_t>((5 * i + 1) % c.config.vocab_size);
  }
  const int64_t windows_before = FakeDevice::get().windows();
  (*host)->zero_grads();
  (*dev)->zero_grads();
  // Two micro-batches: the second accumulates into the first's gradients.
  for (int micro = 0; micro < 2; ++micro) {
    Result<model::LossStats> want =
        (*host)->forward_backward(inputs.data(), targets.data(), B, T, 0.5f);
    Result<model::LossStats> got =
        (*dev)->forward_backward(inputs.data(), targets.data(), B, T, 0.5f);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(std::memcmp(&got->loss, &want->loss, sizeof(double)), 0)
        << got->loss << " vs " << want->loss;
    EXPECT_EQ(std::memcmp(&got->aux_loss, &want->aux_loss, sizeof(double)), 0);
    EXPECT_EQ(std::memcmp(&got->z_loss, &want->z_loss, sizeof(double)), 0);
    std::swap(inputs, targets);
  }
  EXPECT_GT(FakeDevice::get().windows(), windows_before) << "the fake ran no op";
  const auto& hp = (*host)->parameters();
  const auto& dp = (*dev)->parameters();
  ASSERT_EQ(hp.size(), dp.size());
  for (size_t i = 0; i < hp.size(); ++i) {
    EXPECT_EQ(dp[i].value.device(), Device::cuda(0)) << dp[i].name;
    EXPECT_TRUE(same_bits(host_values(dp[i].grad, fake), host_values(hp[i].grad, fake)))
        << dp[i].name << "'s gradient";
  }
  // Evaluation and logits through the same memory.
  Result<model::LossStats> want = (*host)->forward_loss(inputs.data(), targets.data(), B, T);
  Result<model::LossStats> got = (*dev)->forward_loss(inputs.data(), targets.data(), B, T);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(std::memcmp(&got->loss, &want->loss, sizeof(double)), 0);
  Result<Tensor> want_logits = (*host)->forward_logits(inputs.data(), B, T);
  Result<Tensor> got_logits = (*dev)->forward_logits(inputs.data(), B, T);
  ASSERT_TRUE(want_logits.ok()) << want_logits.status().to_string();
  ASSERT_TRUE(got_logits.ok()) << got_logits.status().to_string();
  EXPECT_TRUE(got_logits->device().is_host());
  EXPECT_TRUE(same_bits(host_values(*got_logits, fake), host_values(*want_logits, fake)));
}

INSTANTIATE_TEST_SUITE_P(Configs, FakeDeviceModelTest, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// The fake itself: device memory is unreadable from the host outside a window, and blocks go
// back to the arena.
TEST(FakeDeviceTest, HostAccessOutsideAnOpFaults) {
  FakeDevice& fake = FakeDevice::get();
  const size_t blocks = fake.blocks();
  {
    Result<Buffer> block = fake.runtime().allocator().allocate(64, fake.backend().stream());
    ASSERT_TRUE(block.ok());
    EXPECT_TRUE(fake.contains(block->data(), 64));
    EXPECT_EQ(block->device(), Device::cuda(0));
    EXPECT_EQ(fake.blocks(), blocks + 1);
    fake.backend().fill(static_cast<float*>(block->data()), 16, 2.0f);
    {
      FakeDevice::Access look;
      EXPECT_EQ(static_cast<const float*>(block->data())[15], 2.0f);
    }
    auto* at = static_cast<volatile float*>(block->data());
    EXPECT_DEATH({ (void)at[0]; }, "fake device: SIGSEGV");
  }
  EXPECT_EQ(fake.blocks(), blocks);
}

// A device array the device cannot hold: DeviceOutOfMemory (a bad_alloc) whose message is the
// allocator's, with the array's size; nothing is leaked.
TEST(FakeDeviceTest, AnArrayTooLargeForTheDeviceNamesTheSizes) {
  FakeDevice& fake = FakeDevice::get();
  const size_t blocks = fake.blocks();
  ops::DeviceArray too_big;
  const size_t floats = FakeDevice::kCapacity / sizeof(float) + 1;
  try {
    too_big.resize(fake.backend(), floats);
    FAIL() << "an array larger than the device was allocated";
  } catch (const DeviceOutOfMemory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fake device: out of memory for " + std::to_string(floats * 4) + " bytes"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("a device array growing to " + std::to_string(floats) + " floats, 2048 MiB"),
              std::string::npos)
        << what;
  }
  EXPECT_TRUE(too_big.empty());
  EXPECT_EQ(fake.blocks(), blocks);
}

}  // namespace
}  // namespace ms::test
