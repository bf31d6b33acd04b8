// The trainer end to end on a synthetic dataset (synthetic_data.h), run under mpirun with 1, 2
// and 4 ranks:
//   - data-parallel equivalence: dp = 2 and dp = 4 (sub-groups of the world) give the dp = 1
//     losses within 1e-5 relative over 5 steps with the same global batch, ZeRO-1 on and off;
//   - determinism: the same config twice gives bitwise-identical losses;
//   - bad input is refused before any compute, naming the key and the rule, on every rank;
//   - a non-finite loss stops the run naming the step and the rank;
//   - the run directory holds the resolved config, log, telemetry and traces.
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "synthetic_data.h"

namespace ms::train {
namespace {

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    log::set_level(log::Level::kError);
    Result<std::unique_ptr<comm::MpiCommunicator>> world = comm::MpiCommunicator::world("world");
    ASSERT_TRUE(world.ok());
    world_ = std::move(*world);
    Result<std::string> dir = testing::make_shared_plan_dir(*world_, "/tmp/ms-train-test-XXXXXX");
    ASSERT_TRUE(dir.ok()) << dir.status().to_string();
    dir_ = *dir;
  }
  static void TearDownTestSuite() {
    EXPECT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) std::filesystem::remove_all(dir_);
    world_.reset();
  }

  static config::RunConfig tiny_config(const std::string& name, int64_t zero) {
    return testing::tiny_run_config(dir_, name, zero);
  }

  static Result<TrainSummary> train(comm::Communicator& group, config::RunConfig config) {
    MS_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer,
                        Trainer::create(std::move(config), group));
    return trainer->run();
  }

  // Losses of a dp = 1 run on world rank 0, broadcast to every rank.
  static std::vector<double> single_rank_losses(int64_t zero) {
    auto solo = world_->split(world_->rank() == 0 ? 0 : comm::Communicator::kNoColor, 0, "solo");
    EXPECT_TRUE(solo.ok());
    std::vector<double> losses(5, 0.0);
    if (*solo) {
      Result<TrainSummary> s = train(**solo, tiny_config("dp1-zero" + std::to_string(zero), zero));
      EXPECT_TRUE(s.ok()) << s.status().to_string();
      if (s.ok()) losses = s->losses;
    }
    EXPECT_TRUE(world_->broadcast(losses.data(), losses.size() * sizeof(double), DType::kU8, 0).ok());
    return losses;
  }

  static std::unique_ptr<comm::MpiCommunicator> world_;
  static std::string dir_;
};

std::unique_ptr<comm::MpiCommunicator> TrainerTest::world_;
std::string TrainerTest::dir_;

void expect_close(const std::vector<double>& got, const std::vector<double>& want,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i])) << what << ", step " << i + 1;
  }
}

TEST_F(TrainerTest, DataParallelRunsMatchTheSingleRankRun) {
  const std::vector<double> reference = single_rank_losses(0);
  EXPECT_LT(reference.back(), reference.front());
  expect_close(single_rank_losses(1), reference, "dp 1 with ZeRO-1");
  for (const int dp : {2, 4}) {
    if (dp > world_->size() || world_->size() % dp != 0) continue;
    const int group_index = world_->rank() / dp;
    auto group = world_->split(group_index, world_->rank(), "dp" + std::to_string(dp));
    ASSERT_TRUE(group.ok());
    for (const int64_t zero : {0, 1}) {
      const std::string name = "dp" + std::to_string(dp) + "-zero" + std::to_string(zero) +
                               "-group" + std::to_string(group_index);
      Result<TrainSummary> s = train(**group, tiny_config(name, zero));
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      expect_close(s->losses, reference, name);
    }
  }
}

TEST_F(TrainerTest, SameConfigTwiceGivesBitwiseIdenticalLosses) {
  for (const int64_t zero : {0, 1}) {
    Result<TrainSummary> first = train(*world_, tiny_config("again-a" + std::to_string(zero), zero));
    Result<TrainSummary> second = train(*world_, tiny_config("again-b" + std::to_string(zero), zero));
    ASSERT_TRUE(first.ok()) << first.status().to_string();
    ASSERT_TRUE(second.ok()) << second.status().to_string();
    ASSERT_EQ(first->losses.size(), 5u);
    for (size_t i = 0; i < 5; ++i) {
      EXPECT_EQ(std::memcmp(&first->losses[i], &second->losses[i], sizeof(double)), 0)
          << "step " << i + 1 << ": " << first->losses[i] << " vs " << second->losses[i];
    }
  }
}

// Every rank fails with the message naming `key` (the failing rank's, shared by comm::agree).
void expect_refused(const Result<TrainSummary>& result, int rank, const std::string& key) {
  ASSERT_FALSE(result.ok()) << "rank " << rank;
  EXPECT_NE(result.status().message().find(key), std::string::npos)
      << "rank " << rank << ": " << result.status().to_string();
}

TEST_F(TrainerTest, RefusesBadInputBeforeAnyCompute) {
  const int rank = world_->rank();
  config::RunConfig c = tiny_config("bad", 1);
  c.train.seq_len = 12;
  expect_refused(train(*world_, c), rank, "train.seq_len");
  c = tiny_config("bad", 1);
  c.model.max_seq_len = 8;
  expect_refused(train(*world_, c), rank, "model.max_seq_len");
  c = tiny_config("bad", 1);
  c.model.vocab_size = 50;
  expect_refused(train(*world_, c), rank, "model.vocab_size");
  c = tiny_config("bad", 1);
  c.train.micro_batch = 2;
  c.train.global_batch = 3 * world_->size();
  expect_refused(train(*world_, c), rank, "train.global_batch");
  c = tiny_config("bad", 1);
  c.parallel.tp = world_->size() + 1;  // does not divide the ranks
  expect_refused(train(*world_, c), rank, "parallel.tp");
  c = tiny_config("bad", 1);
  c.data.plan = dir_ + "/missing.plan";
  expect_refused(train(*world_, c), rank, "data.plan");
  c.data.plan.clear();
  expect_refused(train(*world_, c), rank, "data.plan");
  struct stat st;
  EXPECT_NE(::stat((dir_ + "/bad").c_str(), &st), 0) << "nothing may be written for bad input";
}

TEST_F(TrainerTest, NonFiniteLossStopsTheRunNamingStepAndRank) {
  config::RunConfig c = tiny_config("diverge", 0);
  c.optim.lr = 1e30;
  c.optim.warmup_steps = 0;
  c.optim.grad_clip = 0;
  Result<TrainSummary> s = train(*world_, c);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(s.status().message().find("not finite at step "), std::string::npos)
      << s.status().to_string();
  EXPECT_NE(s.status().message().find("on rank 0"), std::string::npos);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_F(TrainerTest, RunDirectoryHoldsConfigLogTelemetryAndTraces) {
  config::RunConfig c = tiny_config("layout", 1);
  c.train.eval_every = 2;
  c.train.eval_batches = 1;
  Result<TrainSummary> s = train(*world_, c);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->eval_losses.size(), 3u);  // steps 2, 4 and the last
  ASSERT_TRUE(world_->barrier().ok());
  const std::string dir = c.run.dir;
  char name[32];
  std::snprintf(name, sizeof(name), "rank-%05d.jsonl", world_->rank());
  const std::string trace = read_text(dir + "/trace/" + name);
  EXPECT_NE(trace.find("\"kind\":\"clock\""), std::string::npos);
  EXPECT_NE(trace.find("\"op\":\"fwd\""), std::string::npos);
  EXPECT_NE(trace.find("\"op\":\"bwd\""), std::string::npos);
  EXPECT_NE(trace.find("\"op\":\"reduce_scatter\",\"group\":\"dp\""), std::string::npos) << trace;
  EXPECT_NE(trace.find("\"op\":\"allgather\""), std::string::npos);
  const std::string telemetry = read_text(dir + "/telemetry/" + name);
  EXPECT_NE(telemetry.find("\"kind\":\"step\""), std::string::npos);
  if (world_->rank() == 0) {
    const std::string resolved = read_text(dir + "/config.resolved.yaml");
    EXPECT_NE(resolved.find("dp: " + std::to_string(world_->size())), std::string::npos);
    EXPECT_NE(resolved.find("# "), std::string::npos);  // keys carry their descriptions
    struct stat st;
    EXPECT_EQ(::stat((dir + "/log.txt").c_str(), &st), 0);
  }
}

}  // namespace
}  // namespace ms::train
