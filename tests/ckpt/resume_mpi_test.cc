// Resuming training from checkpoints (run with 2 and 4 ranks). A run trained with dp = 2 and
// ZeRO-1, saving asynchronously, stopped after step 3 and resumed on the same layout reproduces
// the uninterrupted run's losses bit for bit; resumed on one rank (ZeRO on and off) and, with
// four ranks available, on dp = 4, it matches within 1e-5 relative. `resume: auto` with a
// `latest` naming an incomplete save falls back to the newest complete checkpoint. The
// asynchronous copy-on-write saves of a run that saves every step, so that each save writes
// while the previous one commits and training changes the state, hold the same bytes as the
// synchronous saves of the same run, and the run reports every one of them committed.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"
#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "../train/synthetic_data.h"
#include "train/trainer.h"

namespace ms::train {
namespace {

class ResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log::set_level(log::Level::kError);
    auto world = comm::MpiCommunicator::world("world");
    ASSERT_TRUE(world.ok());
    world_ = std::move(*world);
    Result<std::string> dir = testing::make_shared_plan_dir(*world_, "/tmp/ms-ckpt-resume-XXXXXX");
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    dir_ = *dir;
  }
  static void TearDownTestSuite() {
    EXPECT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) std::filesystem::remove_all(dir_);
    world_.reset();
  }

  static config::RunConfig config(const std::string& name, int64_t zero, int64_t steps) {
    config::RunConfig c = testing::tiny_run_config(dir_, name, zero);
    c.run.seed = 11;
    c.train.steps = steps;
    c.optim.spike_guard.window = 2;  // the guard's window is live state by step 3
    c.checkpoint = {.every = 2, .async = true, .keep = 2, .resume = "auto"};
    return c;
  }

  // Trains on the first `ranks` world ranks (the others wait); every rank gets the losses.
  // `checkpoints`, when given, receives the run's committed step directories on those ranks.
  static std::vector<double> train_on(int ranks, config::RunConfig c,
                                      std::vector<std::string>* checkpoints = nullptr) {
    auto group = world_->split(world_->rank() < ranks ? 0 : comm::Communicator::kNoColor, 0, "g");
    EXPECT_TRUE(group.ok());
    std::vector<double> losses;
    int64_t count = 0;
    if (*group) {
      auto trainer = Trainer::create(std::move(c), **group);
      EXPECT_TRUE(trainer.ok()) << trainer.status().to_string();
      if (trainer.ok()) {
        auto summary = (*trainer)->run();
        EXPECT_TRUE(summary.ok()) << summary.status().to_string();
        if (summary.ok()) losses = summary->losses;
        if (summary.ok() && checkpoints != nullptr) *checkpoints = summary->checkpoints;
      }
      count = static_cast<int64_t>(losses.size());
    }
    EXPECT_TRUE(world_->broadcast(&count, 1, DType::kI64, 0).ok());
    losses.resize(static_cast<size_t>(count));
    EXPECT_TRUE(world_->broadcast(losses.data(), losses.size() * sizeof(double), DType::kU8, 0).ok());
    return losses;
  }

  static std::unique_ptr<comm::MpiCommunicator> world_;
  static std::string dir_;
};

std::unique_ptr<comm::MpiCommunicator> ResumeTest::world_;
std::string ResumeTest::dir_;

TEST_F(ResumeTest, ResumedRunsReproduceTheUninterruptedRun) {
  config::RunConfig full_config = config("full", 1, 6);
  full_config.checkpoint.every = 3;
  full_config.checkpoint.keep = 0;
  const std::vector<double> full = train_on(2, full_config);
  ASSERT_EQ(full.size(), 6u);
  const std::string saved = dir_ + "/full/checkpoints/step-00000003";
  if (world_->rank() == 0) {  // a run interrupted after step 3: its run dir holds that checkpoint
    namespace fs = std::filesystem;
    fs::create_directories(dir_ + "/resumed/checkpoints");
    fs::copy(saved, dir_ + "/resumed/checkpoints/step-00000003", fs::copy_options::recursive);
    std::ofstream(dir_ + "/resumed/checkpoints/latest") << "step-00000003\n";
  }
  const std::vector<double> rest = train_on(2, config("resumed", 1, 6));  // resume: auto
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(rest[i], full[3 + i]) << "step " << i + 4 << " after resuming on dp 2";
  }

  // `latest` naming a save that never got its manifest: auto falls back to step 3.
  if (world_->rank() == 0) {
    namespace fs = std::filesystem;
    const std::string dir = dir_ + "/fallback/checkpoints";
    fs::create_directories(dir + "/step-00000005");
    fs::copy(saved, dir + "/step-00000003", fs::copy_options::recursive);
    std::ofstream(dir + "/latest") << "step-00000005\n";
  }
  const std::vector<double> fallback = train_on(2, config("fallback", 1, 6));
  ASSERT_EQ(fallback.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(fallback[i], full[3 + i]) << "step " << i + 4 << " after falling back to step 3";
  }

  std::vector<std::pair<int, int64_t>> layouts = {{1, 1}, {1, 0}};
  if (world_->size() >= 4) layouts.push_back({4, 1});
  for (const auto& [dp, zero] : layouts) {
    config::RunConfig c = config("dp" + std::to_string(dp) + "z" + std::to_string(zero), zero, 6);
    c.checkpoint.resume = saved;
    const std::vector<double> other = train_on(dp, c);
    ASSERT_EQ(other.size(), 3u) << "dp " << dp;
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_NEAR(other[i], full[3 + i], 1e-5 * std::fabs(full[3 + i]))
          << "step " << i + 4 << " after resuming on dp " << dp << " zero " << zero;
    }
  }
}

// Each async save is copied while the next step runs and before its update (copy-on-write),
// and with a save every step it writes while rank 0 commits the one before; a sync save copies
// and writes before the next step starts. Every step's checkpoint must be the same bytes: data
// files identical, the same shard records (crc32c included) and state.
TEST_F(ResumeTest, AsyncCopyOnWriteSavesHoldTheSameBytesAsSyncSaves) {
  for (int64_t zero : {1, 0}) {
    const std::string tag = "z" + std::to_string(zero);
    config::RunConfig async_config = config("cow-async-" + tag, zero, 6);
    async_config.checkpoint.every = 1;
    async_config.checkpoint.keep = 0;
    config::RunConfig sync_config = config("cow-sync-" + tag, zero, 6);
    sync_config.checkpoint.every = 1;
    sync_config.checkpoint.keep = 0;
    sync_config.checkpoint.async = false;
    std::vector<std::string> committed;
    const std::vector<double> async_losses = train_on(2, async_config, &committed);
    const std::vector<double> sync_losses = train_on(2, sync_config);
    EXPECT_EQ(async_losses, sync_losses) << "zero " << zero;
    if (world_->rank() != 0) continue;
    std::vector<std::string> steps;
    for (int64_t step = 1; step <= 6; ++step) steps.push_back(ckpt::step_dir_name(step));
    std::vector<std::string> committed_names;
    for (const std::string& dir : committed) {
      committed_names.push_back(std::filesystem::path(dir).filename().string());
    }
    EXPECT_EQ(committed_names, steps) << "zero " << zero;
    for (const std::string& step : steps) {
      const std::string a = dir_ + "/cow-async-" + tag + "/checkpoints/" + step;
      const std::string b = dir_ + "/cow-sync-" + tag + "/checkpoints/" + step;
      auto ma = ckpt::Manifest::read(a);
      auto mb = ckpt::Manifest::read(b);
      ASSERT_TRUE(ma.ok() && mb.ok()) << step << " zero " << zero;
      EXPECT_EQ(ma->to_json().at("tensors"), mb->to_json().at("tensors")) << step;
      EXPECT_EQ(ma->state, mb->state) << step;
      for (const std::string& file : {ckpt::data_file_name(0), ckpt::data_file_name(1)}) {
        std::ifstream fa(a + "/" + file, std::ios::binary), fb(b + "/" + file, std::ios::binary);
        const std::string da((std::istreambuf_iterator<char>(fa)), {});
        const std::string db((std::istreambuf_iterator<char>(fb)), {});
        EXPECT_FALSE(da.empty()) << a << "/" << file;
        EXPECT_TRUE(da == db) << step << "/" << file << " differs (zero " << zero << ")";
      }
    }
  }
}

TEST_F(ResumeTest, ResumingFromADamagedCheckpointIsRefused) {
  train_on(2, config("damaged", 0, 2));
  ASSERT_TRUE(world_->barrier().ok());
  const std::string step_dir = dir_ + "/damaged/checkpoints/step-00000002";
  if (world_->rank() == 0) {
    auto m = ckpt::Manifest::read(step_dir);
    ASSERT_TRUE(m.ok());
    const ckpt::ShardRecord& shard = m->tensors.front().shards.front();
    std::filesystem::resize_file(step_dir + "/" + shard.file, shard.offset);
  }
  ASSERT_TRUE(world_->barrier().ok());
  auto group = world_->split(world_->rank() < 2 ? 0 : comm::Communicator::kNoColor, 0, "g");
  ASSERT_TRUE(group.ok());
  if (*group) {
    auto trainer = Trainer::create(config("damaged", 0, 4), **group);
    ASSERT_FALSE(trainer.ok());
    EXPECT_EQ(trainer.status().code(), StatusCode::kCorruption) << trainer.status().to_string();
  }
}

}  // namespace
}  // namespace ms::train
