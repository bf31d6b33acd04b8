// Saving and loading across ranks (run with 1, 2 and 3 ranks): replicated tensors written once
// with the load spread over ranks, ZeRO-style flat ranges decomposed into boxes, loading into a
// different split, async saves, retention, and the faults of the issue: injected write errors
// and ENOSPC fail the save on every rank and commit nothing, damaged data files are refused
// naming file, tensor and offset, and two saves in flight do not disturb each other; a
// copy-on-write save keeps its step's values when training overwrites them before the writer
// copied them. A save started while the previous one commits does not wait for that commit,
// holds its own step's values, and commits after it; a failure of either save of such a pair
// reaches every rank and leaves nothing half-committed.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <mutex>
#include <set>
#include <thread>

#include "ckpt/checkpoint.h"
#include "ckpt/regions.h"
#include "comm/mpi_communicator.h"
#include "io/atomic_file.h"
#include "io/fault_env.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;
using comm::ShardSpec;

// The test state of one "model": a replicated weight, a replicated scalar, and a moment tensor
// split into flat ranges over the ranks (as ZeRO holds it). Values depend on `seed`.
struct TestState {
  std::vector<float> weight;   // (7, 5), replicated
  int64_t counter = 0;         // scalar, replicated
  std::vector<float> moments;  // this rank's flat range of the (6, 4) tensor
  ShardSpec moment_spec = ShardSpec::replicated({});

  TestState(int seed, int rank, int size) : weight(35), counter(seed * 1000) {
    for (size_t i = 0; i < weight.size(); ++i) weight[i] = static_cast<float>(seed) + 0.25f * i;
    const comm::SplitRange r = comm::split_range(24, size, rank);
    moment_spec = *ShardSpec::flat_range({6, 4}, r.offset, r.offset + r.length);
    for (int64_t i = 0; i < r.length; ++i) moments.push_back(moment_value(seed, r.offset + i));
  }
  static float moment_value(int seed, int64_t flat) { return -static_cast<float>(seed) - 0.5f * flat; }

  std::vector<SaveTensor> tensors() const {
    return {{"model.weight", DType::kF32, ShardSpec::replicated({7, 5}), weight.data()},
            {"state.counter", DType::kI64, ShardSpec::replicated({}), &counter},
            {"optimizer.exp_avg.model.weight", DType::kF32, moment_spec, moments.data()}};
  }
};

// Passes every call to `base`; the test Envs below change one or two of them.
class ForwardingEnv : public io::Env {
 public:
  explicit ForwardingEnv(io::Env& base = io::default_env()) : base_(base) {}
  Result<std::unique_ptr<io::File>> open(const std::string& path, io::OpenMode mode) override {
    return base_.open(path, mode);
  }
  Status read_ranges(io::File& file, std::span<const io::ReadRange> ranges) override {
    return base_.read_ranges(file, ranges);
  }
  Status create_dir(const std::string& path) override { return base_.create_dir(path); }
  Status rename(const std::string& from, const std::string& to) override {
    return base_.rename(from, to);
  }
  Status remove_file(const std::string& path) override { return base_.remove_file(path); }
  Status remove_dir(const std::string& path) override { return base_.remove_dir(path); }
  Result<std::vector<std::string>> list_dir(const std::string& path) override {
    return base_.list_dir(path);
  }
  bool exists(const std::string& path) override { return base_.exists(path); }
  bool is_directory(const std::string& path) override { return base_.is_directory(path); }
  bool is_symlink(const std::string& path) override { return base_.is_symlink(path); }
  Status sync_dir(const std::string& path) override { return base_.sync_dir(path); }
  std::string_view backend_name() const override { return base_.backend_name(); }

 protected:
  io::Env& base_;
};

// Opening a data file (rank-*.data) waits until open_gate(): an async writer is held before it
// copies anything into staging.
class GatedEnv final : public ForwardingEnv {
 public:
  void open_gate() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  Result<std::unique_ptr<io::File>> open(const std::string& path, io::OpenMode mode) override {
    if (fs::path(path).filename().string().starts_with("rank-")) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return open_; });
    }
    return base_.open(path, mode);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// For saves that overlap: the commit's rename of a step directory into place waits while
// commits are held (rank 0 publishes, so it is held there), opening the data file of one step's
// save fails, and every value `latest` takes is recorded. A held rename gives up after 20 s
// (held_too_long()), so a save that wrongly waits for a held commit fails the test instead of
// hanging it.
class OverlapEnv final : public ForwardingEnv {
 public:
  using ForwardingEnv::ForwardingEnv;
  void hold_commits(bool hold) {
    std::lock_guard<std::mutex> lock(mu_);
    hold_ = hold;
    cv_.notify_all();
  }
  void fail_data_files_of(int64_t step) { failing_step_ = step; }
  std::vector<std::string> latest_history() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_history_;
  }
  bool held_too_long() const { return held_too_long_; }

  Result<std::unique_ptr<io::File>> open(const std::string& path, io::OpenMode mode) override {
    const fs::path p(path);
    if (failing_step_ >= 0 && p.filename().string().starts_with("rank-") &&
        p.parent_path().filename().string().starts_with(".tmp-" + step_dir_name(failing_step_))) {
      return IOError("injected: cannot create " + path);
    }
    return base_.open(path, mode);
  }
  Status rename(const std::string& from, const std::string& to) override {
    const std::string name = fs::path(to).filename().string();
    if (name.starts_with("step-")) {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(20), [this] { return !hold_; })) {
        held_too_long_ = true;
      }
    }
    Status renamed = base_.rename(from, to);
    if (renamed.ok() && name == "latest") {
      Result<std::string> step = read_latest(to, base_);
      std::lock_guard<std::mutex> lock(mu_);
      latest_history_.push_back(step.ok() ? *step : step.status().to_string());
    }
    return renamed;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool hold_ = false;
  std::atomic<bool> held_too_long_{false};
  std::atomic<int64_t> failing_step_{-1};
  std::vector<std::string> latest_history_;
};

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto world = comm::MpiCommunicator::world("ckpt-test");
    ASSERT_TRUE(world.ok());
    world_ = std::move(world).value();
    char path[256] = {};
    if (world_->rank() == 0) {
      const std::string p = (fs::temp_directory_path() /
                             ("ms-ckpt-" + std::to_string(getpid()) + "-" +
                              ::testing::UnitTest::GetInstance()->current_test_info()->name()))
                                .string();
      fs::remove_all(p);
      std::snprintf(path, sizeof(path), "%s", p.c_str());
    }
    ASSERT_TRUE(world_->broadcast(path, sizeof(path), DType::kU8, 0).ok());
    dir_ = path;
  }
  void TearDown() override {
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) fs::remove_all(dir_);
  }

  SaveRequest request(int64_t step, bool async) const {
    SaveRequest r;
    r.checkpoints_dir = dir_;
    r.step = step;
    r.layout = {world_->size(), world_->size(), 1, 1, 1, 1};
    r.config_yaml = "run: {}\n";
    r.state = {{"step", step}};
    r.async = async;
    r.max_shard_bytes = 24;  // forces many shards so every rank writes several
    return r;
  }
  Status save(const TestState& s, int64_t step, bool async, io::Env& env) {
    Checkpointer ckpt(*world_, env);
    const std::vector<SaveTensor> tensors = s.tensors();
    MS_RETURN_IF_ERROR(ckpt.save(tensors, request(step, async)));
    return ckpt.finish().status();
  }
  // Loads the whole checkpoint state as one rank of `size` ranks and compares with `seed`.
  void expect_state(const std::string& step_dir, int seed, int rank, int size) {
    auto m = Manifest::read(step_dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    TestState want(seed, rank, size);
    TestState got(0, rank, size);
    std::vector<LoadTensor> load = {
        {"model.weight", DType::kF32, ShardSpec::replicated({7, 5}), got.weight.data()},
        {"state.counter", DType::kI64, ShardSpec::replicated({}), &got.counter},
        {"optimizer.exp_avg.model.weight", DType::kF32, got.moment_spec, got.moments.data()}};
    ASSERT_TRUE(load_tensors(step_dir, *m, load, {}, io::default_env()).ok());
    EXPECT_EQ(got.weight, want.weight);
    EXPECT_EQ(got.counter, want.counter);
    EXPECT_EQ(got.moments, want.moments);
  }
  bool has_temporaries() const { return has_temporaries(dir_); }
  static bool has_temporaries(const std::string& dir) {
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(".tmp-") || name.starts_with(".old-")) return true;
    }
    return false;
  }

  std::unique_ptr<comm::MpiCommunicator> world_;
  std::string dir_;
};

TEST_F(CheckpointTest, SyncSaveWritesEachElementOnceAndSpreadsTheLoad) {
  TestState s(3, world_->rank(), world_->size());
  ASSERT_TRUE(save(s, 10, false, io::default_env()).ok());
  auto step_dir = resolve_checkpoint(dir_);
  ASSERT_TRUE(step_dir.ok()) << step_dir.status().to_string();
  EXPECT_EQ(*step_dir, dir_ + "/step-00000010");
  auto m = Manifest::read(*step_dir);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->state["step"], 10);
  std::set<std::string> files;
  for (const TensorRecord& t : m->tensors) {
    int64_t stored = 0;
    for (const ShardRecord& sh : t.shards) {
      stored += Box{sh.global_offsets, sh.lengths}.numel();
      files.insert(sh.file);
    }
    EXPECT_EQ(stored, t.numel()) << t.name;
  }
  EXPECT_EQ(files.size(), static_cast<size_t>(world_->size()));  // every rank wrote a share
  expect_state(*step_dir, 3, world_->rank(), world_->size());
}

TEST_F(CheckpointTest, LoadsIntoOtherSplitsAndWholeTensors) {
  TestState s(5, world_->rank(), world_->size());
  ASSERT_TRUE(save(s, 1, false, io::default_env()).ok());
  const std::string step_dir = dir_ + "/step-00000001";
  for (int size : {1, 2, 4}) {
    for (int rank = 0; rank < size; ++rank) expect_state(step_dir, 5, rank, size);
  }
  auto m = Manifest::read(step_dir);
  ASSERT_TRUE(m.ok());
  std::vector<float> block(6);
  const int64_t offsets[] = {2, 1}, lengths[] = {2, 3};
  ASSERT_TRUE(read_region(step_dir, *m, "model.weight", offsets, lengths, block.data()).ok());
  EXPECT_EQ(block[0], 5 + 0.25f * 11);
  EXPECT_EQ(block[5], 5 + 0.25f * 18);
}

TEST_F(CheckpointTest, AsyncSaveCommitsAtAPollAndTheSnapshotIsIsolated) {
  TestState s(7, world_->rank(), world_->size());
  Checkpointer ckpt(*world_);
  const std::vector<SaveTensor> tensors = s.tensors();
  ASSERT_TRUE(ckpt.save(tensors, request(20, true)).ok());
  std::fill(s.weight.begin(), s.weight.end(), 0.0f);  // training goes on and changes weights
  std::optional<SaveReport> report;
  while (!report) {
    auto polled = ckpt.poll();
    ASSERT_TRUE(polled.ok()) << polled.status().to_string();
    report = *polled;
  }
  EXPECT_FALSE(ckpt.in_flight());
  EXPECT_GE(report->total_s, 0.0);
  EXPECT_GT(report->bytes_written, 0u);
  expect_state(dir_ + "/step-00000020", 7, world_->rank(), world_->size());
}

// On one rank an async save commits from its writer thread once written, with no poll in
// between (no step boundary to wait for); on several ranks the writes are agreed at a poll. Every
// rank's report says when rank 0 committed, which is no later than when the poll saw it.
TEST_F(CheckpointTest, AsyncSaveReportsWhenItCommittedAndOnOneRankNeedsNoPoll) {
  TestState s(8, world_->rank(), world_->size());
  Checkpointer ckpt(*world_);
  const std::vector<SaveTensor> tensors = s.tensors();
  ASSERT_TRUE(ckpt.save(tensors, request(30, true)).ok());
  const std::string step_dir = dir_ + "/step-00000030";
  if (world_->size() == 1) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!fs::exists(dir_ + "/latest") && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_TRUE(fs::exists(dir_ + "/latest")) << "not committed within 20 s without a poll";
    EXPECT_EQ(*resolve_checkpoint(dir_), step_dir);
  }
  std::optional<SaveReport> report;
  while (!report) {
    auto polled = ckpt.poll();
    ASSERT_TRUE(polled.ok()) << polled.status().to_string();
    report = *polled;
  }
  EXPECT_GT(report->committed_s, 0.0);
  // Rank 0's clock: another rank that called save() later may see its own total_s below it.
  if (world_->rank() == 0) {
    EXPECT_LE(report->committed_s, report->total_s);
  }
  int64_t mine = std::llround(1e6 * report->committed_s);
  std::vector<int64_t> gathered(static_cast<size_t>(world_->size()));
  ASSERT_TRUE(world_->allgather(&mine, gathered.data(), 1, DType::kI64).ok());
  for (int64_t g : gathered) EXPECT_EQ(g, gathered[0]);  // rank 0's figure everywhere
  EXPECT_FALSE(ckpt.in_flight());
  expect_state(step_dir, 8, world_->rank(), world_->size());
  EXPECT_FALSE(has_temporaries());
}

// A Checkpointer destroyed while its async save still writes abandons that save: nothing is
// committed, on one rank too, where the writer would otherwise publish it. The writer is held
// before its data file until after the destructor began.
TEST_F(CheckpointTest, AnAsyncSaveStillWritingWhenTheCheckpointerGoesIsNotCommitted) {
  TestState s(9, world_->rank(), world_->size());
  GatedEnv env;
  auto ckpt = std::make_unique<Checkpointer>(*world_, env);
  const std::vector<SaveTensor> tensors = s.tensors();
  ASSERT_TRUE(ckpt->save(tensors, request(31, true)).ok());
  std::thread opener([&env] {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    env.open_gate();
  });
  ckpt.reset();  // waits for the writer, which the gate releases
  opener.join();
  ASSERT_TRUE(world_->barrier().ok());
  EXPECT_FALSE(fs::exists(dir_ + "/step-00000031"));
  EXPECT_FALSE(fs::exists(dir_ + "/latest"));
}

// Training overwrites the weight (after before_overwrite on it) while the writer is held before
// its first copy, so the caller copies those boxes itself; then the writer runs and the rest is
// overwritten after before_overwrite_all(), racing the writer's copies. The checkpoint must hold
// the values of the save's step, not the later ones.
TEST_F(CheckpointTest, CopyOnWriteSaveKeepsTheStepsValuesWhenTrainingOverwritesThem) {
  TestState s(7, world_->rank(), world_->size());
  GatedEnv env;
  Checkpointer ckpt(*world_, env);
  const std::vector<SaveTensor> tensors = s.tensors();
  SaveRequest r = request(21, true);
  r.copy_on_write = true;
  ASSERT_TRUE(ckpt.save(tensors, r).ok());
  ckpt.before_overwrite(s.weight.data(), s.weight.size() * sizeof(float));
  std::fill(s.weight.begin(), s.weight.end(), -1.0f);
  env.open_gate();
  ckpt.before_overwrite_all();
  std::fill(s.moments.begin(), s.moments.end(), -2.0f);
  s.counter = -3;
  std::optional<SaveReport> report;
  while (!report) {
    auto polled = ckpt.poll();
    ASSERT_TRUE(polled.ok()) << polled.status().to_string();
    report = *polled;
  }
  // Every rank writes some of the weight's 24-byte boxes (the planner spreads them), and the
  // writer could copy none of them before the gate opened.
  EXPECT_GT(report->caller_copied_bytes, 0u);
  EXPECT_LE(report->caller_copied_bytes, report->bytes_written);
  EXPECT_GE(report->stall_s, report->caller_copy_s);
  expect_state(dir_ + "/step-00000021", 7, world_->rank(), world_->size());
}

// A tensor of three copy buckets (4 MiB each) per rank: an overwrite inside the middle one, made
// while the writer is held, copies that bucket only; the writer copies the other two.
TEST_F(CheckpointTest, CopyOnWriteCopiesOnlyTheBucketsAnOverwriteTouches) {
  const int64_t n = 3 << 20;  // floats per rank: 12 MiB
  const int64_t first = world_->rank() * n;
  std::vector<float> mine(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mine[static_cast<size_t>(i)] = static_cast<float>(first + i);
  const ShardSpec spec = *ShardSpec::flat_range({world_->size() * n}, first, first + n);
  const std::vector<SaveTensor> tensors = {{"big", DType::kF32, spec, mine.data()}};
  GatedEnv env;
  Checkpointer ckpt(*world_, env);
  SaveRequest r = request(40, true);
  r.copy_on_write = true;
  r.max_shard_bytes = 64ull << 20;
  ASSERT_TRUE(ckpt.save(tensors, r).ok());
  float* middle = mine.data() + n / 2;
  ckpt.before_overwrite(middle, 1000 * sizeof(float));
  std::fill(middle, middle + 1000, -1.0f);
  env.open_gate();
  auto finished = ckpt.finish();
  ASSERT_TRUE(finished.ok()) << finished.status().to_string();
  ASSERT_TRUE(finished->has_value());
  EXPECT_EQ((*finished)->caller_copied_bytes, 4u << 20);
  auto m = Manifest::read(dir_ + "/step-00000040");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::vector<float> got(static_cast<size_t>(n));
  const std::vector<LoadTensor> load = {{"big", DType::kF32, spec, got.data()}};
  ASSERT_TRUE(load_tensors(dir_ + "/step-00000040", *m, load, {}, io::default_env()).ok());
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; ++i) wrong += got[static_cast<size_t>(i)] != static_cast<float>(first + i);
  EXPECT_EQ(wrong, 0);
}

// Nothing copied on the caller's thread when it overwrites nothing before the writer is done,
// and the staging buffer is reused by the next copy-on-write save.
TEST_F(CheckpointTest, CopyOnWriteSavesWithoutOverwritesCopyNothingOnTheCaller) {
  Checkpointer ckpt(*world_);
  for (int seed : {8, 9}) {
    TestState s(seed, world_->rank(), world_->size());
    const std::vector<SaveTensor> tensors = s.tensors();
    SaveRequest r = request(30 + seed, true);
    r.copy_on_write = true;
    ASSERT_TRUE(ckpt.save(tensors, r).ok());
    auto finished = ckpt.finish();
    ASSERT_TRUE(finished.ok()) << finished.status().to_string();
    ASSERT_TRUE(finished->has_value());
    EXPECT_EQ((*finished)->caller_copied_bytes, 0u);
    ckpt.before_overwrite_all();  // no save in flight: nothing to do
    expect_state(dir_ + "/step-000000" + std::to_string(30 + seed), seed, world_->rank(),
                 world_->size());
  }
}

// The writer hands the snapshot to the disk as it copies it, bucket by bucket. A state of many
// buckets (3 x 4 MiB and an unaligned tail per tensor), overwritten by training right after
// save() (copy-on-write, the caller copying from the back while the writer copies from the
// front) or not at all, is written with the values of its step and checksums that load.
TEST_F(CheckpointTest, AManyBucketSnapshotIsWrittenWhileItIsCopied) {
  const int64_t n = 3 * (1 << 20) + 777;  // f32 elements: more than 3 buckets
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n));
  Checkpointer ckpt(*world_);
  for (const bool overwrite : {false, true}) {
    SCOPED_TRACE(overwrite ? "overwritten" : "left alone");
    for (int64_t i = 0; i < n; ++i) {
      a[static_cast<size_t>(i)] = static_cast<float>(i);
      b[static_cast<size_t>(i)] = -static_cast<float>(i);
    }
    const std::vector<SaveTensor> tensors = {
        {"a", DType::kF32, ShardSpec::replicated({n}), a.data()},
        {"b", DType::kF32, ShardSpec::replicated({n}), b.data()}};
    const int64_t step = overwrite ? 41 : 40;
    SaveRequest r = request(step, true);
    r.max_shard_bytes = 64ull << 20;
    r.copy_on_write = true;
    ASSERT_TRUE(ckpt.save(tensors, r).ok());
    if (overwrite) {
      ckpt.before_overwrite_all();
      std::fill(a.begin(), a.end(), 0.5f);
      std::fill(b.begin(), b.end(), 0.25f);
    }
    auto finished = ckpt.finish();
    ASSERT_TRUE(finished.ok()) << finished.status().to_string();
    const std::string step_dir = dir_ + "/" + step_dir_name(step);
    auto m = Manifest::read(step_dir);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    std::vector<float> got_a(a.size()), got_b(b.size());
    std::vector<LoadTensor> load = {
        {"a", DType::kF32, ShardSpec::replicated({n}), got_a.data()},
        {"b", DType::kF32, ShardSpec::replicated({n}), got_b.data()}};
    const Status loaded = load_tensors(step_dir, *m, load, {}, io::default_env());
    ASSERT_TRUE(loaded.ok()) << loaded.to_string();  // every shard's crc32c checked
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) {
      wrong += got_a[static_cast<size_t>(i)] != static_cast<float>(i);
      wrong += got_b[static_cast<size_t>(i)] != -static_cast<float>(i);
    }
    EXPECT_EQ(wrong, 0);
  }
}

// reserve_staging sizes the buffer for the save: the first save allocates nothing and still
// keeps its step's values when training overwrites them. Without it the first save allocates.
TEST_F(CheckpointTest, ReservedStagingServesTheFirstSave) {
  for (const bool reserve : {false, true}) {
    TestState s(11, world_->rank(), world_->size());
    const std::vector<SaveTensor> tensors = s.tensors();
    GatedEnv env;
    Checkpointer ckpt(*world_, env);
    SaveRequest r = request(reserve ? 51 : 50, true);
    r.copy_on_write = true;
    if (reserve) {
      ASSERT_TRUE(ckpt.reserve_staging(tensors, r.max_shard_bytes).ok());
    }
    ASSERT_TRUE(ckpt.save(tensors, r).ok());
    ckpt.before_overwrite_all();  // the writer is held: the caller copies everything
    std::fill(s.weight.begin(), s.weight.end(), -1.0f);
    std::fill(s.moments.begin(), s.moments.end(), -2.0f);
    env.open_gate();
    auto finished = ckpt.finish();
    ASSERT_TRUE(finished.ok()) << finished.status().to_string();
    ASSERT_TRUE(finished->has_value());
    if (reserve) {
      EXPECT_EQ((*finished)->staging_allocated_bytes, 0u);
    } else {
      EXPECT_GE((*finished)->staging_allocated_bytes, (*finished)->caller_copied_bytes);
      EXPECT_GT((*finished)->staging_allocated_bytes, 0u);
    }
    expect_state(dir_ + "/step-000000" + std::to_string(r.step), 11, world_->rank(),
                 world_->size());
  }
}

TEST_F(CheckpointTest, RetentionKeepsTheNewestAndLatestFollows) {
  Checkpointer ckpt(*world_);
  for (int step = 1; step <= 4; ++step) {
    TestState s(step, world_->rank(), world_->size());
    SaveRequest r = request(step, step % 2 == 0);
    r.keep = 2;
    const std::vector<SaveTensor> tensors = s.tensors();
    ASSERT_TRUE(ckpt.save(tensors, r).ok());
  }
  ASSERT_TRUE(ckpt.finish().ok());
  auto steps = list_checkpoints(dir_, io::default_env());
  ASSERT_TRUE(steps.ok());
  EXPECT_EQ(*steps, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(*resolve_checkpoint(dir_), dir_ + "/step-00000004");
  expect_state(dir_ + "/step-00000004", 4, world_->rank(), world_->size());
}

TEST_F(CheckpointTest, WriteFailureOnOneRankCommitsNothingAnywhere) {
  TestState good(1, world_->rank(), world_->size());
  ASSERT_TRUE(save(good, 1, false, io::default_env()).ok());
  io::FaultInjectingEnv faulty(io::default_env());
  if (world_->rank() == world_->size() - 1) faulty.fail_nth_write(1);  // its data file
  TestState next(2, world_->rank(), world_->size());
  Status failed = save(next, 2, false, faulty);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("nothing was committed"), std::string::npos);
  ASSERT_TRUE(world_->barrier().ok());
  EXPECT_EQ(*list_checkpoints(dir_, io::default_env()), (std::vector<int64_t>{1}));
  EXPECT_FALSE(has_temporaries());
  expect_state(*resolve_checkpoint(dir_), 1, world_->rank(), world_->size());
}

TEST_F(CheckpointTest, DiskFullDuringAnAsyncSaveFailsVisiblyAtThePoll) {
  TestState good(1, world_->rank(), world_->size());
  ASSERT_TRUE(save(good, 1, false, io::default_env()).ok());
  io::FaultInjectingEnv faulty(io::default_env());
  if (world_->rank() == 0) faulty.enospc_after(30);
  TestState next(2, world_->rank(), world_->size());
  Checkpointer ckpt(*world_, faulty);
  const std::vector<SaveTensor> tensors = next.tensors();
  ASSERT_TRUE(ckpt.save(tensors, request(2, true)).ok());  // training continues meanwhile
  Result<std::optional<SaveReport>> polled = std::optional<SaveReport>();
  while (polled.ok() && !*polled) polled = ckpt.poll();
  ASSERT_FALSE(polled.ok());
  EXPECT_NE(polled.status().message().find("rank 0"), std::string::npos);
  ASSERT_TRUE(world_->barrier().ok());
  EXPECT_EQ(*resolve_checkpoint(dir_), dir_ + "/step-00000001");
  EXPECT_FALSE(has_temporaries());
}

// Rank 0 publishes. A failure at any step of the commit (renaming the step directory into
// place, the fsync of the checkpoints directory after it, renaming `latest`, the fsync after
// that) must leave the previous checkpoint as `latest`, no new step directory and no
// temporaries, including when the save replaces an existing step.
TEST_F(CheckpointTest, PublishFailuresLeaveThePreviousCheckpointLatest) {
  TestState good(1, world_->rank(), world_->size());
  ASSERT_TRUE(save(good, 1, false, io::default_env()).ok());
  // Which fsyncs of the checkpoints directory follow the two renames: the last two of a save.
  io::FaultInjectingEnv probe(io::default_env());
  TestState other(7, world_->rank(), world_->size());
  ASSERT_TRUE(save(other, 2, false, probe).ok());
  const int syncs = probe.dir_syncs_of(dir_);
  if (world_->rank() == 0) {
    fs::remove_all(dir_ + "/step-00000002");
    std::ofstream(dir_ + "/latest") << "step-00000001\n";
  }
  ASSERT_TRUE(world_->barrier().ok());
  const std::vector<std::function<void(io::FaultInjectingEnv&, int64_t step)>> faults = {
      [&](io::FaultInjectingEnv& e, int64_t step) {
        e.fail_rename_onto(dir_ + "/step-0000000" + std::to_string(step));
      },
      [&](io::FaultInjectingEnv& e, int64_t) { e.fail_rename_onto(dir_ + "/latest"); },
      [&](io::FaultInjectingEnv& e, int64_t) { e.fail_nth_dir_sync_of(dir_, syncs - 1); },
      [&](io::FaultInjectingEnv& e, int64_t) { e.fail_nth_dir_sync_of(dir_, syncs); },
  };
  for (size_t f = 0; f < faults.size(); ++f) {
    for (int64_t step : {2, 1}) {
      // Renaming onto step 1 failing would also stop putting the older save back.
      if (f == 0 && step == 1) continue;
      io::FaultInjectingEnv faulty(io::default_env());
      if (world_->rank() == 0) faults[f](faulty, step);
      const Status failed = save(other, step, false, faulty);
      EXPECT_FALSE(failed.ok()) << "fault " << f << " step " << step;
      ASSERT_TRUE(world_->barrier().ok());
      EXPECT_EQ(*list_checkpoints(dir_, io::default_env()), (std::vector<int64_t>{1}))
          << "fault " << f << " step " << step;
      EXPECT_EQ(*resolve_checkpoint(dir_), dir_ + "/step-00000001");
      EXPECT_FALSE(has_temporaries()) << "fault " << f << " step " << step;
      expect_state(dir_ + "/step-00000001", 1, world_->rank(), world_->size());
      ASSERT_TRUE(world_->barrier().ok());
    }
  }
}

TEST_F(CheckpointTest, BitFlipIsRefusedNamingFileTensorAndOffset) {
  TestState s(1, world_->rank(), world_->size());
  ASSERT_TRUE(save(s, 1, false, io::default_env()).ok());
  const std::string step_dir = dir_ + "/step-00000001";
  auto m = Manifest::read(step_dir);
  ASSERT_TRUE(m.ok());
  const ShardRecord& shard = m->find("model.weight")->shards.back();
  io::FaultInjectingEnv flipping(io::default_env());
  flipping.corrupt_on_read(step_dir + "/" + shard.file, shard.offset + 1, 0x10);
  std::vector<float> weight(35);
  const int64_t offsets[] = {0, 0}, lengths[] = {7, 5};
  Status st = read_region(step_dir, *m, "model.weight", offsets, lengths, weight.data(), flipping);
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  EXPECT_NE(st.message().find(shard.file), std::string::npos);
  EXPECT_NE(st.message().find("model.weight"), std::string::npos);
  EXPECT_NE(st.message().find("offset " + std::to_string(shard.offset)), std::string::npos);
}

TEST_F(CheckpointTest, TruncatedDataFileIsRefusedNamingFileAndTensor) {
  TestState s(1, world_->rank(), world_->size());
  ASSERT_TRUE(save(s, 1, false, io::default_env()).ok());
  const std::string step_dir = dir_ + "/step-00000001";
  auto m = Manifest::read(step_dir);
  ASSERT_TRUE(m.ok());
  const ShardRecord& shard = m->find("model.weight")->shards.back();
  ASSERT_TRUE(world_->barrier().ok());
  if (world_->rank() == 0) fs::resize_file(step_dir + "/" + shard.file, shard.offset + 2);
  ASSERT_TRUE(world_->barrier().ok());
  std::vector<float> weight(35);
  const int64_t offsets[] = {0, 0}, lengths[] = {7, 5};
  Status st = read_region(step_dir, *m, "model.weight", offsets, lengths, weight.data());
  ASSERT_EQ(st.code(), StatusCode::kCorruption) << st.to_string();
  EXPECT_NE(st.message().find(shard.file), std::string::npos);
  EXPECT_NE(st.message().find("model.weight"), std::string::npos);
}

TEST_F(CheckpointTest, TwoSavesInFlightDoNotDisturbEachOther) {
  TestState a(11, world_->rank(), world_->size());
  TestState b(12, world_->rank(), world_->size());
  Checkpointer first(*world_), second(*world_);
  const std::vector<SaveTensor> ta = a.tensors(), tb = b.tensors();
  ASSERT_TRUE(first.save(ta, request(11, true)).ok());
  ASSERT_TRUE(second.save(tb, request(12, true)).ok());
  ASSERT_TRUE(second.finish().ok());
  ASSERT_TRUE(first.finish().ok());
  expect_state(dir_ + "/step-00000011", 11, world_->rank(), world_->size());
  expect_state(dir_ + "/step-00000012", 12, world_->rank(), world_->size());
}

// Copies the values of TestState(seed) into `s`, keeping its buffers (the SaveTensors point at
// them), as a training step changes its tensors in place.
void set_state(TestState& s, int seed, int rank, int size) {
  const TestState next(seed, rank, size);
  std::copy(next.weight.begin(), next.weight.end(), s.weight.begin());
  std::copy(next.moments.begin(), next.moments.end(), s.moments.begin());
  s.counter = next.counter;
}

// Every outcome still to be handed back: finish() once, then poll() while one waits.
std::vector<Result<std::optional<SaveReport>>> finish_all(Checkpointer& ckpt) {
  std::vector<Result<std::optional<SaveReport>>> out = {ckpt.finish()};
  while (!ckpt.in_flight() && ckpt.has_outcome()) out.push_back(ckpt.poll());
  return out;
}

// A save every step, as ms-train makes with checkpoint.every 1: save 2 starts while rank 0 is
// still publishing save 1 (its rename into place is held). save() must return without waiting
// for that commit; training then overwrites the state (copy-on-write) and save 2 still holds
// step 2's values. Commits, the values `latest` takes and the outcomes handed back all follow
// the order of the saves.
TEST_F(CheckpointTest, ASaveOverlapsThePreviousCommitAndCommitsAfterIt) {
  const int rank = world_->rank(), size = world_->size();
  OverlapEnv env;
  Checkpointer ckpt(*world_, env);
  TestState s(1, rank, size);
  const std::vector<SaveTensor> tensors = s.tensors();
  auto save_step = [&](int64_t step) {
    SaveRequest r = request(step, true);
    r.copy_on_write = true;
    return ckpt.save(tensors, r);
  };
  env.hold_commits(true);
  ASSERT_TRUE(save_step(1).ok());
  ckpt.before_overwrite_all();
  set_state(s, 2, rank, size);
  ASSERT_TRUE(save_step(2).ok());  // save 1's writes agreed: its commit starts and is held
  ckpt.before_overwrite_all();
  set_state(s, 3, rank, size);
  auto polled = ckpt.poll();
  ASSERT_TRUE(polled.ok()) << polled.status().to_string();
  EXPECT_FALSE(polled->has_value());  // save 1 is still publishing
  EXPECT_TRUE(ckpt.in_flight());
  ASSERT_TRUE(world_->barrier().ok());
  EXPECT_FALSE(fs::exists(dir_ + "/step-00000001"));
  EXPECT_FALSE(fs::exists(dir_ + "/latest"));
  ASSERT_TRUE(world_->barrier().ok());
  env.hold_commits(false);
  ASSERT_TRUE(save_step(3).ok());  // waits for commit 1, then commits save 2 behind save 3
  ckpt.before_overwrite_all();
  set_state(s, 4, rank, size);
  const auto outcomes = finish_all(ckpt);
  ASSERT_EQ(outcomes.size(), 3u);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto& outcome = outcomes[static_cast<size_t>(step - 1)];
    ASSERT_TRUE(outcome.ok()) << outcome.status().to_string();
    ASSERT_TRUE(outcome->has_value());
    EXPECT_EQ((*outcome)->step, step);
    expect_state(dir_ + "/" + step_dir_name(step), static_cast<int>(step), rank, size);
  }
  EXPECT_FALSE(ckpt.in_flight());
  EXPECT_FALSE(ckpt.has_outcome());
  EXPECT_FALSE(env.held_too_long()) << "save 2 waited for the held commit of save 1";
  if (rank == 0) {
    EXPECT_EQ(env.latest_history(),
              (std::vector<std::string>{"step-00000001", "step-00000002", "step-00000003"}));
  }
  EXPECT_EQ(*resolve_checkpoint(dir_), dir_ + "/step-00000003");
  EXPECT_FALSE(has_temporaries());
}

// One save of an overlapping pair fails while the other goes on: rank 0's commit of save 2
// fails (its rename into place) while save 3 writes, or save 3's data file cannot be created on
// the last rank while save 2 commits, or both. Each failure reaches every rank as that save's
// outcome, in step order; a failed save leaves no step directory and no temporary behind, the
// other one commits, and `latest` names the newest committed save.
TEST_F(CheckpointTest, AFailureOfEitherOverlappingSaveLeavesNothingHalfCommitted) {
  const int rank = world_->rank(), size = world_->size();
  struct Case {
    bool fail_commit_2;
    bool fail_write_3;
  };
  const Case cases[] = {{true, false}, {false, true}, {true, true}};
  for (size_t c = 0; c < std::size(cases); ++c) {
    SCOPED_TRACE("case " + std::to_string(c));
    const std::string dir = dir_ + "/case-" + std::to_string(c);
    io::FaultInjectingEnv faulty(io::default_env());
    if (rank == 0 && cases[c].fail_commit_2) faulty.fail_rename_onto(dir + "/step-00000002");
    OverlapEnv env(faulty);
    if (rank == size - 1 && cases[c].fail_write_3) env.fail_data_files_of(3);
    Checkpointer ckpt(*world_, env);
    TestState s(1, rank, size);
    const std::vector<SaveTensor> tensors = s.tensors();
    for (int64_t step = 1; step <= 3; ++step) {
      set_state(s, static_cast<int>(step), rank, size);
      SaveRequest r = request(step, true);
      r.checkpoints_dir = dir;
      r.copy_on_write = true;
      ASSERT_TRUE(ckpt.save(tensors, r).ok());
      ckpt.before_overwrite_all();
    }
    const auto outcomes = finish_all(ckpt);
    ASSERT_EQ(outcomes.size(), 3u);
    EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].status().to_string();
    EXPECT_EQ(outcomes[1].ok(), !cases[c].fail_commit_2) << outcomes[1].status().to_string();
    EXPECT_EQ(outcomes[2].ok(), !cases[c].fail_write_3) << outcomes[2].status().to_string();
    if (cases[c].fail_write_3) {
      EXPECT_NE(outcomes[2].status().message().find("failed on rank " + std::to_string(size - 1)),
                std::string::npos);
      EXPECT_NE(outcomes[2].status().message().find("nothing was committed"), std::string::npos);
    }
    ASSERT_TRUE(world_->barrier().ok());
    std::vector<int64_t> committed = {1};
    if (!cases[c].fail_commit_2) committed.push_back(2);
    if (!cases[c].fail_write_3) committed.push_back(3);
    EXPECT_EQ(*list_checkpoints(dir, io::default_env()), committed);
    EXPECT_EQ(*resolve_checkpoint(dir), dir + "/" + step_dir_name(committed.back()));
    EXPECT_FALSE(has_temporaries(dir));
    for (int64_t step : committed) {
      expect_state(dir + "/" + step_dir_name(step), static_cast<int>(step), rank, size);
    }
    ASSERT_TRUE(world_->barrier().ok());
  }
}

TEST_F(CheckpointTest, ZstdShardsRoundTrip) {
  TestState s(4, world_->rank(), world_->size());
  Checkpointer ckpt(*world_);
  SaveRequest r = request(3, false);
  r.codec = "zstd";
  const std::vector<SaveTensor> tensors = s.tensors();
  ASSERT_TRUE(ckpt.save(tensors, r).ok());
  auto m = Manifest::read(dir_ + "/step-00000003");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->tensors[0].shards[0].codec, "zstd");
  expect_state(dir_ + "/step-00000003", 4, (world_->rank() + 1) % world_->size(), world_->size());
}

// Direct and page-cache saves write the same data files byte for byte: sync saves (from the
// caller's tensors through the bounce buffer) and async ones (staging written in place), with
// shares of several pieces and unaligned ends; both load back exactly.
TEST_F(CheckpointTest, DirectAndPageCacheSavesWriteTheSameFiles) {
  const int64_t rows = 1031, cols = 777;  // 3.2 MB; shards of 1 MiB end mid-block
  std::vector<float> big(rows * cols);
  for (size_t i = 0; i < big.size(); ++i) big[i] = 0.5f * static_cast<float>(i % 100003) - 7;
  const int64_t counter = 42;
  const std::vector<SaveTensor> tensors = {
      {"big", DType::kF32, ShardSpec::replicated({rows, cols}), big.data()},
      {"state.counter", DType::kI64, ShardSpec::replicated({}), &counter}};
  for (bool async : {false, true}) {
    std::string step_dirs[2];
    for (bool direct : {false, true}) {
      SaveRequest r = request(1, async);
      r.checkpoints_dir = dir_ + (async ? "/async-" : "/sync-") + (direct ? "direct" : "cached");
      r.max_shard_bytes = 1 << 20;
      r.direct_io = direct;
      Checkpointer ckpt(*world_);
      ASSERT_TRUE(ckpt.save(tensors, r).ok());
      auto finished = ckpt.finish();
      ASSERT_TRUE(finished.ok()) << finished.status().to_string();
      step_dirs[direct] = r.checkpoints_dir + "/step-00000001";
      auto m = Manifest::read(step_dirs[direct]);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      std::vector<float> back(big.size());
      const int64_t offsets[] = {0, 0}, lengths[] = {rows, cols};
      ASSERT_TRUE(read_region(step_dirs[direct], *m, "big", offsets, lengths, back.data()).ok());
      EXPECT_TRUE(back == big) << "async " << async << " direct " << direct;
    }
    ASSERT_TRUE(world_->barrier().ok());
    const std::string name = "/" + data_file_name(world_->rank());
    auto slurp = [](const std::string& path) {
      std::ifstream in(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    };
    const std::string cached = slurp(step_dirs[0] + name), direct = slurp(step_dirs[1] + name);
    EXPECT_FALSE(cached.empty()) << name;
    EXPECT_TRUE(cached == direct) << "async " << async << ": " << name << " differs ("
                                  << cached.size() << " and " << direct.size() << " bytes)";
  }
}

TEST(CheckTensors, MissingAndUnexpectedAreErrorsUnlessAllowed) {
  Manifest m;
  m.tensors.push_back({"a", DType::kF32, {2}, {}});
  m.tensors.push_back({"b", DType::kF32, {2}, {}});
  const std::vector<ExpectedTensor> want = {{"a", DType::kF32, {2}}, {"c", DType::kF32, {2}}};
  Status st = check_tensors(m, want, {});
  EXPECT_NE(st.message().find("\"c\""), std::string::npos);
  st = check_tensors(m, want, {true, false});
  EXPECT_NE(st.message().find("\"b\""), std::string::npos);
  EXPECT_TRUE(check_tensors(m, want, {true, true}).ok());
  const std::vector<ExpectedTensor> wrong = {{"a", DType::kF32, {3}}, {"b", DType::kF32, {2}}};
  EXPECT_FALSE(check_tensors(m, wrong, {}).ok());
}

}  // namespace
}  // namespace ms::ckpt
