// Injected faults during `ms-ckpt export` and `ms-ckpt reshard`, on a checkpoint written by the
// real save path on 2 ranks. A write failure at any point, a full disk, a torn write, a failing
// fsync or rename, or a failure after the output directory was renamed into place: the command
// fails naming the file, leaves no output directory (export) or no new step directory and the
// previous `latest` (reshard), no temporaries, and the source checkpoint verifies unchanged. A
// byte corrupted on read of the source is reported naming the file, the tensor and the offset.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/diff.h"
#include "ckpt/hf_export.h"
#include "ckpt/hf_names.h"
#include "ckpt/reshard_offline.h"
#include "ckpt/verify.h"
#include "comm/mpi_communicator.h"
#include "config/run_config.h"
#include "io/fault_env.h"
#include "tests/ckpt/tiny_checkpoint.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

using test_support::tiny_model;

// Every parameter of tiny_model() as a ramp 0.001 * element index.
std::vector<Tensor> ramp_values() {
  std::vector<Tensor> values;
  for (const TensorInfo& info : hf_parameter_specs(tiny_model())) {
    Tensor x = Tensor::empty(DType::kF32, info.shape);
    for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = 0.001f * static_cast<float>(i);
    values.push_back(std::move(x));
  }
  return values;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

class ExchangeFaultTest : public test_support::TinyCheckpointTest {
 protected:
  void SetUp() override {
    TinyCheckpointTest::SetUp();
    if (world_->rank() == 0) {
      std::ofstream(dir_ + "/tokenizer.json") << R"({"model":{"type":"BPE"}})";
    }
    ASSERT_TRUE(world_->barrier().ok());
  }

  // Saves every parameter of tiny_model() (the embedding split by rows across the ranks, the
  // rest replicated) plus one optimizer moment as step `step` of dir_/name; returns the step
  // dir.
  std::string save(const std::string& name, int64_t step) {
    return TinyCheckpointTest::save(name, step, ramp_values(), dir_ + "/tokenizer.json");
  }

  // Exports the checkpoint at `step` to dir_/hf, reading and writing through `env`.
  Result<HfExportSummary> export_through(const std::string& step, io::Env& env) {
    Result<Manifest> m = Manifest::read(step, env);
    if (!m.ok()) return m.status();
    TensorCatalog catalog =
        checkpoint_catalog(step, std::make_shared<const Manifest>(std::move(*m)), env);
    HfExportOptions options;
    options.output_dir = dir_ + "/hf";
    options.max_shard_bytes = 1024;  // several files and an index
    options.tokenizer_json = dir_ + "/tokenizer.json";
    return export_hf(tiny_model(), catalog, options, env);
  }

  // dir_ holds only what the test made: no export output and no temporaries beside it.
  void expect_no_export_output(const std::string& what) const {
    EXPECT_FALSE(fs::exists(dir_ + "/hf")) << what;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      EXPECT_FALSE(contains(entry.path().filename().string(), "hf")) << what << ": "
                                                                    << entry.path();
    }
  }

  ReshardOptions reshard_options() const {
    ReshardOptions options;
    options.output_dir = dir_ + "/r";
    options.target = *parse_reshard_target("dp=4,zero=1");
    options.max_shard_bytes = 256;
    return options;
  }

  // dir_/r still holds only its step-1 checkpoint, which `latest` names and which loads.
  void expect_output_unchanged(const std::string& what) const {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_ + "/r")) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"latest", step_dir_name(1)})) << what;
    EXPECT_EQ(slurp(dir_ + "/r/latest"), step_dir_name(1) + "\n") << what;
    Result<std::string> resolved = resolve_checkpoint(dir_ + "/r", io::default_env());
    ASSERT_TRUE(resolved.ok()) << what << ": " << resolved.status().to_string();
    EXPECT_TRUE(Manifest::read(*resolved).ok()) << what;
  }

  void expect_source_intact(const std::string& step) const {
    Result<VerifyReport> v = verify_checkpoint(step, io::default_env());
    ASSERT_TRUE(v.ok()) << v.status().to_string();
    EXPECT_TRUE(v->ok()) << (v->problems.empty() ? "" : v->problems[0]);
  }
};

bool names_an_export_file(const std::string& message) {
  for (const char* f : {".safetensors", "config.json", "tokenizer.json", "index.json"}) {
    if (contains(message, f)) return true;
  }
  return false;
}

TEST_F(ExchangeFaultTest, ExportFailingAtEveryWriteLeavesNoOutput) {
  const std::string step = save("a", 3);
  if (world_->rank() != 0) return;
  int failures = 0;
  for (int n = 1; n < 200; ++n) {
    io::FaultInjectingEnv faulty(io::default_env());
    faulty.fail_nth_write(n);
    Result<HfExportSummary> r = export_through(step, faulty);
    if (r.ok()) break;
    ++failures;
    const std::string what = "write " + std::to_string(n) + ": " + r.status().message();
    EXPECT_EQ(r.status().code(), StatusCode::kIOError) << what;
    EXPECT_TRUE(names_an_export_file(r.status().message())) << what;
    expect_no_export_output(what);
  }
  // Several files, the index, config.json and tokenizer.json were each hit.
  EXPECT_GE(failures, 6);
  ASSERT_TRUE(fs::exists(dir_ + "/hf/model.safetensors.index.json"));
  expect_source_intact(step);
}

TEST_F(ExchangeFaultTest, ExportFailsCleanlyOnFullDiskTornWriteAndFailingSyncOrRename) {
  const std::string step = save("a", 3);
  if (world_->rank() != 0) return;
  struct Case {
    const char* what;
    void (*arm)(io::FaultInjectingEnv&);
  };
  const Case cases[] = {
      {"ENOSPC", [](io::FaultInjectingEnv& e) { e.enospc_after(3000); }},
      {"torn write", [](io::FaultInjectingEnv& e) { e.short_write_nth(3, 5); }},
      {"fsync", [](io::FaultInjectingEnv& e) { e.fail_file_sync(true); }},
      {"rename", [](io::FaultInjectingEnv& e) { e.fail_rename(true); }},
  };
  for (const Case& c : cases) {
    io::FaultInjectingEnv faulty(io::default_env());
    c.arm(faulty);
    Result<HfExportSummary> r = export_through(step, faulty);
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_TRUE(names_an_export_file(r.status().message())) << c.what << ": "
                                                            << r.status().message();
    expect_no_export_output(c.what);
  }
  expect_source_intact(step);
}

TEST_F(ExchangeFaultTest, ExportFailingAtItsCommitLeavesNoOutput) {
  const std::string step = save("a", 3);
  if (world_->rank() != 0) return;
  io::FaultInjectingEnv rename_fails(io::default_env());
  rename_fails.fail_rename_onto(dir_ + "/hf");
  Result<HfExportSummary> r = export_through(step, rename_fails);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), dir_ + "/hf")) << r.status().message();
  expect_no_export_output("rename of the output directory");

  // The rename went through but the parent's fsync failed: the export is taken back.
  io::FaultInjectingEnv sync_fails(io::default_env());
  sync_fails.fail_nth_dir_sync_of(dir_, 1);
  r = export_through(step, sync_fails);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.status().message(), "fsync directory")) << r.status().message();
  expect_no_export_output("fsync of the parent directory");
  expect_source_intact(step);
}

TEST_F(ExchangeFaultTest, ExportNamesTheFileTensorAndOffsetOfACorruptSourceShard) {
  const std::string step = save("a", 3);
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(step);
  ASSERT_TRUE(m.ok());
  const ShardRecord& shard = m->find("model.norm.weight")->shards.at(0);
  io::FaultInjectingEnv flipping(io::default_env());
  flipping.corrupt_on_read(step + "/" + shard.file, shard.offset + 2, 0x40);
  Result<HfExportSummary> r = export_through(step, flipping);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  const std::string& msg = r.status().message();
  EXPECT_TRUE(contains(msg, step + "/" + shard.file)) << msg;
  EXPECT_TRUE(contains(msg, "\"model.norm.weight\"")) << msg;
  EXPECT_TRUE(contains(msg, "byte offset " + std::to_string(shard.offset))) << msg;
  expect_no_export_output("corrupt source");
  expect_source_intact(step);  // the flip was on the read path only
}

// dir_/r holds a step-1 checkpoint; resharding step 9 into it fails at the n-th write of one
// rank, for every n until it succeeds, and each failure leaves dir_/r as it was.
TEST_F(ExchangeFaultTest, ReshardFailingAtAnyWriteOnAnyRankCommitsNothing) {
  save("r", 1);
  const std::string step = save("a", 9);
  for (int faulted = 0; faulted < world_->size(); ++faulted) {
    bool done = false;
    for (int n = 1; n < 200 && !done; ++n) {
      io::FaultInjectingEnv faulty(io::default_env());
      if (world_->rank() == faulted) faulty.fail_nth_write(n);
      Result<std::string> r = reshard_checkpoint(step, reshard_options(), *world_, faulty);
      done = r.ok();
      if (done || world_->rank() != 0) continue;
      const std::string what = "rank " + std::to_string(faulted) + " write " +
                               std::to_string(n) + ": " + r.status().message();
      EXPECT_TRUE(faulted == 0 ? contains(r.status().message(), dir_ + "/r/")
                               : contains(r.status().message(), "failed on rank 1"))
          << what;
      expect_output_unchanged(what);
    }
    EXPECT_TRUE(done);
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) {  // back to the step-1 checkpoint for the next round
      fs::remove_all(dir_ + "/r/" + step_dir_name(9));
      std::ofstream(dir_ + "/r/latest", std::ios::trunc) << step_dir_name(1) << "\n";
    }
    ASSERT_TRUE(world_->barrier().ok());
  }
  if (world_->rank() == 0) expect_source_intact(step);
}

TEST_F(ExchangeFaultTest, ReshardFullDiskAndFailedCommitStepsCommitNothing) {
  save("r", 1);
  const std::string step = save("a", 9);
  const std::string out = dir_ + "/r";
  struct Case {
    const char* what;
    int rank;  // the rank whose Env fails
    std::function<void(io::FaultInjectingEnv&)> arm;
  };
  const std::vector<Case> cases = {
      {"ENOSPC on rank 1", 1, [](io::FaultInjectingEnv& f) { f.enospc_after(700); }},
      {"ENOSPC on rank 0", 0, [](io::FaultInjectingEnv& f) { f.enospc_after(900); }},
      {"renames fail", 0, [](io::FaultInjectingEnv& f) { f.fail_rename(true); }},
      {"step directory rename", 0,
       [&](io::FaultInjectingEnv& f) { f.fail_rename_onto(out + "/step-00000009"); }},
      {"fsync after the step directory rename", 0,
       [&](io::FaultInjectingEnv& f) { f.fail_nth_dir_sync_of(out, 1); }},
      {"latest rename", 0, [&](io::FaultInjectingEnv& f) { f.fail_rename_onto(out + "/latest"); }},
      {"fsync after the latest rename", 0,
       [&](io::FaultInjectingEnv& f) { f.fail_nth_dir_sync_of(out, 2); }},
  };
  for (const Case& c : cases) {
    io::FaultInjectingEnv faulty(io::default_env());
    if (world_->rank() == c.rank) c.arm(faulty);
    Result<std::string> r = reshard_checkpoint(step, reshard_options(), *world_, faulty);
    EXPECT_FALSE(r.ok()) << c.what;
    if (world_->rank() == c.rank) {
      EXPECT_TRUE(contains(r.status().message(), out + "/")) << c.what << ": "
                                                             << r.status().message();
    }
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) expect_output_unchanged(c.what);
    ASSERT_TRUE(world_->barrier().ok());
  }
  if (world_->rank() == 0) expect_source_intact(step);
}

TEST_F(ExchangeFaultTest, ReshardNamesTheFileTensorAndOffsetOfACorruptSourceShard) {
  const std::string step = save("a", 9);
  // Rank 0 reshards alone, so the rank that reads the damaged shard is the one reporting.
  Result<std::unique_ptr<comm::Communicator>> solo = world_->split(
      world_->rank() == 0 ? 0 : comm::Communicator::kNoColor, 0, "solo");
  ASSERT_TRUE(solo.ok());
  if (world_->rank() != 0) return;
  Result<Manifest> m = Manifest::read(step);
  ASSERT_TRUE(m.ok());
  const ShardRecord& shard = m->find("model.embed_tokens.weight")->shards.back();
  io::FaultInjectingEnv flipping(io::default_env());
  flipping.corrupt_on_read(step + "/" + shard.file, shard.offset + shard.length - 1, 0x01);
  Result<std::string> r = reshard_checkpoint(step, reshard_options(), **solo, flipping);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  const std::string& msg = r.status().message();
  EXPECT_TRUE(contains(msg, step + "/" + shard.file)) << msg;
  EXPECT_TRUE(contains(msg, "\"model.embed_tokens.weight\"")) << msg;
  EXPECT_TRUE(contains(msg, "byte offset " + std::to_string(shard.offset))) << msg;
  EXPECT_TRUE(contains(msg, "crc32c mismatch")) << msg;
  EXPECT_FALSE(fs::exists(dir_ + "/r/" + step_dir_name(9)));
  EXPECT_FALSE(fs::exists(dir_ + "/r/latest"));
  expect_source_intact(step);
}

// A source the readers refuse (shards that overlap, a data file shorter than its manifest)
// fails the reshard on every rank, naming the tensor, before any temporary directory exists:
// the output keeps its step-1 checkpoint and nothing else.
TEST_F(ExchangeFaultTest, ReshardOfADamagedSourceFailsEverywhereAndLeavesNoTemporary) {
  save("r", 1);
  const std::string step = save("a", 9);
  const std::string manifest_path = step + "/manifest.json";
  const std::string intact = slurp(manifest_path);
  const std::vector<std::string> damages = {"overlap", "truncated"};
  for (const std::string& damage : damages) {
    if (world_->rank() == 0) {
      nlohmann::json j = nlohmann::json::parse(intact);
      for (nlohmann::json& t : j["tensors"]) {
        if (t["name"] != "model.norm.weight") continue;
        if (damage == "overlap") {
          t["shards"].push_back(t["shards"][0]);
        } else {
          t["shards"][0]["offset"] = 1 << 20;  // past the end of its data file
        }
      }
      std::ofstream(manifest_path, std::ios::trunc) << j.dump();
    }
    ASSERT_TRUE(world_->barrier().ok());
    Result<std::string> r = reshard_checkpoint(step, reshard_options(), *world_,
                                               io::default_env());
    ASSERT_FALSE(r.ok()) << damage;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << damage;
    const std::string& msg = r.status().message();
    EXPECT_TRUE(contains(msg, "model.norm.weight")) << damage << ": " << msg;
    EXPECT_TRUE(contains(msg, damage == "overlap" ? "shards overlap" : "the file has only"))
        << damage << ": " << msg;
    ASSERT_TRUE(world_->barrier().ok());
    if (world_->rank() == 0) {
      expect_output_unchanged(damage);
      std::ofstream(manifest_path, std::ios::trunc) << intact;
    }
    ASSERT_TRUE(world_->barrier().ok());
  }
}

}  // namespace
}  // namespace ms::ckpt
