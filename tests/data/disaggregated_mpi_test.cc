// Disaggregated loading under mpirun: the last rank is a loader rank that owns the plan and the
// datasets; the other ranks are data-parallel trainers that receive ready micro-batches over
// MPI. Every trainer must get exactly the batches a local Loader with the same options yields,
// before and after a restore, and errors on the loader rank must reach the trainer.
#include "data/disaggregated.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "comm/mpi_communicator.h"
#include "plan_fixtures.h"

namespace ms::data {
namespace {

using ::testing::HasSubstr;

constexpr int kLoaders = 1;

class Disaggregated : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = comm::MpiCommunicator::world();
    ASSERT_TRUE(world.ok()) << world.status().to_string();
    world_ = std::move(world).value();
    if (world_->size() < 2) GTEST_SKIP() << "needs a loader rank and at least one trainer";
    char path[512] = {0};
    if (world_->rank() == 0) {
      dir_ = std::make_unique<testing::PlanDir>();
      testing::plan_or_fail(testing::two_source_mixture(*dir_, 120), dir_->file("mix.plan"));
      std::strncpy(path, dir_->file("mix.plan").c_str(), sizeof(path) - 1);
    }
    ASSERT_TRUE(world_->broadcast(path, sizeof(path), DType::kU8, 0).ok());
    plan_path_ = path;
  }

  void TearDown() override {
    if (world_ && world_->size() >= 2) {
      EXPECT_TRUE(world_->barrier().ok());
    }
  }

  bool is_loader() const { return world_->rank() >= world_->size() - kLoaders; }
  int trainers() const { return world_->size() - kLoaders; }

  LoaderOptions options() const {
    LoaderOptions o;
    o.plan_path = plan_path_;
    o.micro_batch = 2;
    o.global_batch = 4 * trainers();
    o.dp_rank = world_->rank();
    o.dp_size = trainers();
    return o;
  }

  // Loader ranks serve until every trainer finished; trainers run `body` and then finish.
  // `stop` is the loader ranks' stop request (none by default).
  void run_roles(const std::function<void()>& body, const std::function<bool()>& stop = {}) {
    if (is_loader()) {
      Status s = run_loader_server(*world_, kLoaders, stop);
      EXPECT_TRUE(s.ok()) << s.to_string();
      return;
    }
    body();
    Status s = finish_disaggregated_loading(*world_, kLoaders);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }

  std::unique_ptr<comm::MpiCommunicator> world_;
  std::unique_ptr<testing::PlanDir> dir_;
  std::string plan_path_;
};

void expect_same_batches(BatchSource& a, BatchSource& b, int count) {
  for (int i = 0; i < count; ++i) {
    Result<MicroBatch> x = a.next();
    Result<MicroBatch> y = b.next();
    ASSERT_TRUE(x.ok()) << x.status().to_string();
    ASSERT_TRUE(y.ok()) << y.status().to_string();
    EXPECT_EQ(x->step, y->step);
    EXPECT_EQ(x->micro_index, y->micro_index);
    EXPECT_EQ(x->inputs, y->inputs) << "micro-batch " << i;
    EXPECT_EQ(x->targets, y->targets) << "micro-batch " << i;
  }
}

TEST_F(Disaggregated, TrainersReceiveTheBatchesOfLocalLoaders) {
  run_roles([&] {
    auto remote = DisaggregatedLoaderClient::open(*world_, kLoaders, options());
    ASSERT_TRUE(remote.ok()) << remote.status().to_string();
    auto local = Loader::open(options());
    ASSERT_TRUE(local.ok());
    EXPECT_EQ((*remote)->server_rank(), world_->size() - 1);
    EXPECT_EQ((*remote)->seq_len(), 16);
    EXPECT_EQ((*remote)->micro_batches_per_step(), 2);
    EXPECT_EQ((*remote)->samples_in_split(), 120);
    EXPECT_EQ((*remote)->vocab_size(), 50257);
    expect_same_batches(**remote, **local, 9);
    EXPECT_FALSE((*remote)->loader_stop_requested());
    EXPECT_EQ((*remote)->state().consumed_samples, (*local)->state().consumed_samples);
    EXPECT_EQ((*remote)->state().plan_hash, (*local)->state().plan_hash);
  });
}

TEST_F(Disaggregated, RestoreAndResetMatchLocalLoaders) {
  run_roles([&] {
    auto local = Loader::open(options());
    ASSERT_TRUE(local.ok());
    for (int i = 0; i < 6; ++i) ASSERT_TRUE((*local)->next().ok());
    auto remote = DisaggregatedLoaderClient::open(*world_, kLoaders, options());
    ASSERT_TRUE(remote.ok());
    ASSERT_TRUE((*remote)->restore((*local)->state()).ok());
    expect_same_batches(**remote, **local, 5);
    (*remote)->reset();
    (*local)->reset();
    expect_same_batches(**remote, **local, 3);
    Status refused = (*remote)->restore(LoaderState{"ffffffffffffffff", 0});
    EXPECT_THAT(refused.message(), HasSubstr("loader rank"));
  });
}

TEST_F(Disaggregated, LoaderRankErrorsReachTheTrainer) {
  run_roles([&] {
    LoaderOptions o = options();
    o.plan_path += ".missing";
    auto remote = DisaggregatedLoaderClient::open(*world_, kLoaders, o);
    ASSERT_FALSE(remote.ok());
    EXPECT_EQ(remote.status().code(), StatusCode::kNotFound);
    EXPECT_THAT(remote.status().message(), HasSubstr("loader rank"));
    o = options();
    o.global_batch += 1;
    EXPECT_THAT(DisaggregatedLoaderClient::open(*world_, kLoaders, o).status().message(),
                HasSubstr("divisible"));
  });
}

// A loader rank asked to stop says so in its batch replies, and goes on serving the same batches
// until the trainer finishes.
TEST_F(Disaggregated, LoaderStopRequestReachesTheTrainer) {
  run_roles(
      [&] {
        auto remote = DisaggregatedLoaderClient::open(*world_, kLoaders, options());
        ASSERT_TRUE(remote.ok()) << remote.status().to_string();
        auto local = Loader::open(options());
        ASSERT_TRUE(local.ok());
        EXPECT_FALSE((*remote)->loader_stop_requested());  // only next() reports it
        expect_same_batches(**remote, **local, 3);
        EXPECT_TRUE((*remote)->loader_stop_requested());
      },
      [] { return true; });
}

}  // namespace
}  // namespace ms::data
