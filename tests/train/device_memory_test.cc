// Where a group meets the device its buffers come from: a communicator that moves CUDA buffers
// (as NCCL's does) handed host buffers is refused up front, naming the group and both devices,
// by the distributed optimizer (its flat buffers) and by the model (its activations), instead
// of handing host addresses to a device transport.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/transformer.h"
#include "tests/parallel/failing_communicator.h"
#include "train/distributed_optimizer.h"

namespace ms::train {
namespace {

// A two-rank group whose buffers live on cuda:0; no call reaches its transport.
class CudaGroup : public parallel::testing::FailingCommunicator {
 public:
  CudaGroup() : FailingCommunicator(0, 2) {}
  Device memory() const override { return Device::cuda(0); }
};

TEST(CheckMemory, AcceptsTheGroupsOwnDeviceAndNoGroup) {
  CudaGroup group;
  EXPECT_TRUE(comm::check_memory(nullptr, Device::host(), "x").ok());
  EXPECT_TRUE(comm::check_memory(&group, Device::cuda(0), "x").ok());
  const Status wrong = comm::check_memory(&group, Device::host(), "the rows");
  EXPECT_EQ(wrong.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("'failing' moves buffers on cuda:0, but the rows are on cpu"),
            std::string::npos)
      << wrong.to_string();
}

TEST(CheckMemory, TheOptimizerRefusesADpGroupOnAnotherDevice) {
  Tensor value = Tensor::zeros(DType::kF32, {4});
  Tensor grad = Tensor::zeros(DType::kF32, {4});
  std::vector<TrainableParam> params = {{"w", &value, &grad}};
  config::OptimConfig optim;
  optim.betas = {0.9, 0.999};
  CudaGroup dp;
  Result<std::unique_ptr<DistributedOptimizer>> made =
      DistributedOptimizer::create(dp, std::move(params), optim, {});
  ASSERT_FALSE(made.ok());
  EXPECT_EQ(made.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(made.status().message().find("the optimizer's flat buffers are on cpu"),
            std::string::npos)
      << made.status().to_string();
}

TEST(CheckMemory, TheModelRefusesATpGroupOnAnotherDevice) {
  config::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.d_ff = 16;
  c.max_seq_len = 8;
  CudaGroup tp;
  model::ModelParallel parallel;
  parallel.tp = &tp;
  Result<std::unique_ptr<model::Transformer>> made = model::Transformer::create(c, 1, parallel);
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("the model's activations are on cpu"),
            std::string::npos)
      << made.status().to_string();
}

}  // namespace
}  // namespace ms::train
