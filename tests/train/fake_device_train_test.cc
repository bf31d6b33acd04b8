// The single-rank training step on the guarded fake device (fake_device.h), registered as the
// process's CUDA backend: the same run with train.device cuda:0 and cpu gives bitwise-equal
// training and evaluation losses, for a dense model, an MoE model, document masking, full
// recomputation and LAMB, with evaluation and checkpoints on. The fake keeps device memory
// PROT_NONE outside its ops and copies, so any host access of it on the training path
// (the model, the optimizer, the loss, evaluation, checkpoint staging) dies with SIGSEGV, and
// an op handed a host array where the seam wants device memory aborts naming the op.
//
// An mpi test on one rank: the trainer takes an MPI world.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "fake_device.h"
#include "synthetic_data.h"
#include "train/trainer.h"

namespace ms::train {
namespace {

class FakeDeviceTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log::set_level(log::Level::kError);
    test::FakeDevice::register_as_cuda();
    Result<std::unique_ptr<comm::MpiCommunicator>> world = comm::MpiCommunicator::world("world");
    ASSERT_TRUE(world.ok());
    world_ = std::move(*world);
    Result<std::string> dir = testing::make_shared_plan_dir(*world_, "/tmp/ms-fake-device-XXXXXX");
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    dir_ = *dir;
  }
  static void TearDownTestSuite() {
    if (world_->rank() == 0) std::filesystem::remove_all(dir_);
    world_.reset();
  }

  // A short run of the tiny dense config: 3 steps, evaluation after step 2 and at the end, a
  // checkpoint after step 2 and at the end.
  static config::RunConfig short_run(const std::string& name) {
    config::RunConfig c = testing::tiny_run_config(dir_, name, 0);
    c.train.steps = 3;
    c.train.eval_every = 2;
    c.train.eval_batches = 1;
    c.checkpoint.every = 2;
    c.checkpoint.resume = "none";
    return c;
  }

  static Result<TrainSummary> train(config::RunConfig config) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                        Trainer::create(std::move(config), *world_));
    return trainer->run();
  }

  // The run on the host and on the fake: bitwise-equal losses, and the fake did the work.
  static void expect_device_equals_host(config::RunConfig c) {
    const std::string name = c.run.dir;
    c.run.dir = name + "-cpu";
    c.train.device = "cpu";
    Result<TrainSummary> host = train(c);
    ASSERT_TRUE(host.ok()) << host.status().to_string();
    const int64_t windows = test::FakeDevice::get().windows();
    c.run.dir = name + "-cuda";
    c.train.device = "cuda:0";
    Result<TrainSummary> dev = train(c);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    EXPECT_GT(test::FakeDevice::get().windows(), windows) << "nothing ran on the fake device";
    EXPECT_GT(test::FakeDevice::get().peak(), 0u);
    ASSERT_EQ(dev->losses.size(), static_cast<size_t>(c.train.steps));
    ASSERT_EQ(dev->losses.size(), host->losses.size());
    for (size_t i = 0; i < host->losses.size(); ++i) {
      EXPECT_EQ(std::memcmp(&dev->losses[i], &host->losses[i], sizeof(double)), 0)
          << "step " << i + 1 << ": " << dev->losses[i] << " on the fake vs " << host->losses[i]
          << " on the host";
    }
    ASSERT_EQ(dev->eval_losses.size(), host->eval_losses.size());
    for (size_t i = 0; i < host->eval_losses.size(); ++i) {
      EXPECT_EQ(std::memcmp(&dev->eval_losses[i], &host->eval_losses[i], sizeof(double)), 0)
          << "evaluation " << i + 1 << ": " << dev->eval_losses[i] << " vs "
          << host->eval_losses[i];
    }
    EXPECT_EQ(dev->checkpoints.size(), host->checkpoints.size());
    EXPECT_EQ(dev->checkpoint_failures, 0);
  }

  static std::unique_ptr<comm::MpiCommunicator> world_;
  static std::string dir_;
};

std::unique_ptr<comm::MpiCommunicator> FakeDeviceTrainTest::world_;
std::string FakeDeviceTrainTest::dir_;

TEST_F(FakeDeviceTrainTest, DenseRunEqualsTheHostRun) {
  expect_device_equals_host(short_run("dense"));
}

TEST_F(FakeDeviceTrainTest, ZeroOneRunEqualsTheHostRun) {
  config::RunConfig c = short_run("zero1");
  c.parallel.zero = 1;
  c.parallel.compress.check_replicas = true;
  expect_device_equals_host(c);
}

TEST_F(FakeDeviceTrainTest, MoeRunEqualsTheHostRun) {
  config::RunConfig c = short_run("moe");
  c.model.moe.num_experts = 4;
  c.model.moe.top_k = 2;
  c.model.moe.shared_expert_d_ff = 16;
  c.model.moe.z_loss_coef = 1e-3;
  c.model.moe.expert_bias = true;
  c.model.d_ff = 32;
  expect_device_equals_host(c);
}

TEST_F(FakeDeviceTrainTest, DocumentMaskRunEqualsTheHostRun) {
  config::RunConfig c = short_run("documents");
  c.train.document_mask = true;
  c.train.document_positions = true;
  c.data.eod_id = 5;
  expect_device_equals_host(c);
}

TEST_F(FakeDeviceTrainTest, FullRecomputeLambRunEqualsTheHostRun) {
  config::RunConfig c = short_run("recompute");
  c.parallel.recompute = config::Recompute::kFull;
  c.optim.name = config::OptimizerKind::kLamb;
  expect_device_equals_host(c);
}

// bf16 mixed precision (train.precision) on the fake device gives the host's bf16 run bit for
// bit: both round the same matmul inputs (ops/backend.h).
TEST_F(FakeDeviceTrainTest, Bf16RunEqualsTheHostBf16Run) {
  config::RunConfig c = short_run("bf16");
  c.train.precision = config::Precision::kBf16;
  expect_device_equals_host(c);
}

// bf16 against f32 on the host, 20 steps of a dense and an MoE model: every step's loss within
// 2e-2 relative of the f32 run's (issue 42's bound for the GPU), not equal to it (the rounding
// took place), and the bf16 run repeated gives the same bits.
TEST_F(FakeDeviceTrainTest, Bf16LossTracksF32AndRepeatsItsBits) {
  for (const bool moe : {false, true}) {
    SCOPED_TRACE(moe ? "moe" : "dense");
    config::RunConfig c = short_run(moe ? "bf16-curve-moe" : "bf16-curve");
    c.train.steps = 20;
    c.train.eval_every = 0;
    c.checkpoint.every = 0;
    if (moe) {
      c.model.moe.num_experts = 4;
      c.model.moe.top_k = 2;
      c.model.d_ff = 32;
    }
    const auto run = [&](config::Precision precision, const std::string& suffix) {
      config::RunConfig r = c;
      r.run.dir += suffix;
      r.train.precision = precision;
      return train(r);
    };
    Result<TrainSummary> f32 = run(config::Precision::kF32, "-f32");
    Result<TrainSummary> bf16 = run(config::Precision::kBf16, "-bf16");
    Result<TrainSummary> again = run(config::Precision::kBf16, "-bf16-again");
    ASSERT_TRUE(f32.ok()) << f32.status().to_string();
    ASSERT_TRUE(bf16.ok()) << bf16.status().to_string();
    ASSERT_TRUE(again.ok()) << again.status().to_string();
    ASSERT_EQ(bf16->losses.size(), 20u);
    ASSERT_EQ(f32->losses.size(), 20u);
    ASSERT_EQ(again->losses.size(), 20u);
    bool differs = false;
    for (size_t i = 0; i < 20; ++i) {
      EXPECT_LE(std::fabs(bf16->losses[i] - f32->losses[i]), 2e-2 * std::fabs(f32->losses[i]))
          << "step " << i + 1 << ": bf16 " << bf16->losses[i] << " vs f32 " << f32->losses[i];
      EXPECT_EQ(std::memcmp(&bf16->losses[i], &again->losses[i], sizeof(double)), 0)
          << "step " << i + 1 << " differs between two bf16 runs";
      differs = differs || bf16->losses[i] != f32->losses[i];
    }
    EXPECT_TRUE(differs) << "the bf16 run gave the f32 losses: nothing was rounded";
    EXPECT_LT(f32->losses.back(), f32->losses.front()) << "the f32 run did not learn";
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Checkpoints cross devices both ways: a save from the fake device (async and sync) holds the
// host run's bytes, and each device resumes the other's save with the uninterrupted run's
// losses bit for bit (the resume writes the saved moments into the device's optimizer state).
TEST_F(FakeDeviceTrainTest, CheckpointsMoveBetweenHostAndDevice) {
  config::RunConfig c = short_run("ckpt");
  c.parallel.zero = 1;
  c.train.steps = 4;
  c.train.eval_every = 0;
  Result<TrainSummary> host = train([&] {
    config::RunConfig h = c;
    h.run.dir += "-cpu";
    return h;
  }());
  ASSERT_TRUE(host.ok()) << host.status().to_string();
  for (const bool async : {true, false}) {
    config::RunConfig d = c;
    d.run.dir += async ? "-cuda-async" : "-cuda-sync";
    d.train.device = "cuda:0";
    d.checkpoint.async = async;
    Result<TrainSummary> dev = train(d);
    ASSERT_TRUE(dev.ok()) << dev.status().to_string();
    ASSERT_EQ(dev->checkpoints.size(), host->checkpoints.size());
    for (size_t i = 0; i < host->checkpoints.size(); ++i) {
      const std::string want = file_bytes(host->checkpoints[i] + "/rank-00000.data");
      EXPECT_FALSE(want.empty()) << host->checkpoints[i];
      EXPECT_TRUE(file_bytes(dev->checkpoints[i] + "/rank-00000.data") == want)
          << dev->checkpoints[i] << " (async " << async << ") differs from the host's save";
    }
  }
  ASSERT_GE(host->checkpoints.size(), 1u);
  for (const char* device : {"cuda:0", "cpu"}) {
    config::RunConfig r = c;
    r.train.device = device;
    r.run.dir += r.train.device == "cpu" ? "-resumed-on-cpu" : "-resumed-on-cuda";
    // The cpu resumes the fake device's save, the fake device the cpu's.
    r.checkpoint.resume =
        (r.train.device == "cpu" ? c.run.dir + "-cuda-async" : c.run.dir + "-cpu") +
        "/checkpoints/step-00000002";
    Result<TrainSummary> resumed = train(r);
    ASSERT_TRUE(resumed.ok()) << resumed.status().to_string();
    ASSERT_EQ(resumed->first_step, 3);
    ASSERT_EQ(resumed->losses.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(std::memcmp(&resumed->losses[i], &host->losses[2 + i], sizeof(double)), 0)
          << "step " << i + 3 << " resumed on " << device << ": " << resumed->losses[i] << " vs "
          << host->losses[2 + i];
    }
  }
}

}  // namespace
}  // namespace ms::train
