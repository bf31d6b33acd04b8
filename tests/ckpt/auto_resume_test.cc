// `checkpoint.resume: auto` picks its checkpoint with newest_complete_checkpoint: the one
// `latest` names when that is complete, otherwise the newest complete step directory with a
// warning saying what was wrong with `latest`, and nothing (start fresh) when no checkpoint is
// complete. A step directory counts as complete when it holds manifest.json; temporaries of
// unfinished saves never count.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ckpt/checkpoint.h"

namespace ms::ckpt {
namespace {

namespace fs = std::filesystem;

class AutoResumeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/ms_auto_resume_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/checkpoints";
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A step directory; complete ones hold a manifest.json (its content does not matter here).
  void make_step(int64_t step, bool complete = true) const {
    const std::string d = dir_ + "/" + step_dir_name(step);
    fs::create_directories(d);
    std::ofstream(d + "/rank-00000.data") << "data";
    if (complete) std::ofstream(d + "/manifest.json") << "{}";
  }
  void write_latest(const std::string& text) const { std::ofstream(dir_ + "/latest") << text; }
  AutoResumeChoice choose() const {
    Result<AutoResumeChoice> r = newest_complete_checkpoint(dir_, io::default_env());
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return r.ok() ? *r : AutoResumeChoice{};
  }
  std::string step_path(int64_t step) const { return dir_ + "/" + step_dir_name(step); }

  std::string root_, dir_;
};

TEST_F(AutoResumeTest, FollowsACompleteLatestWithoutWarning) {
  make_step(10);
  make_step(20);
  write_latest("step-00000020\n");
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, step_path(20));
  EXPECT_EQ(c.warning, "");
}

TEST_F(AutoResumeTest, AValidLatestWinsOverANewerStepDirectory) {
  // A run resumed explicitly from step 10 abandons the old line that reached step 20; its
  // `latest` names what it saved last.
  make_step(10);
  make_step(20);
  write_latest("step-00000010\n");
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, step_path(10));
  EXPECT_EQ(c.warning, "");
}

TEST_F(AutoResumeTest, MissingLatestFallsBackToTheNewestCompleteStep) {
  make_step(10);
  make_step(30);
  make_step(20);
  make_step(40, /*complete=*/false);
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, step_path(30));
  EXPECT_NE(c.warning.find(dir_ + "/latest is missing"), std::string::npos) << c.warning;
  EXPECT_NE(c.warning.find("resuming from the newest complete checkpoint, " + step_path(30)),
            std::string::npos)
      << c.warning;
}

TEST_F(AutoResumeTest, LatestNamingADeletedDirectoryFallsBack) {
  make_step(10);
  make_step(20);
  write_latest("step-00000030\n");
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, step_path(20));
  EXPECT_NE(c.warning.find("names step-00000030, which is not a complete checkpoint"),
            std::string::npos)
      << c.warning;
}

TEST_F(AutoResumeTest, LatestNamingADirectoryWithoutManifestFallsBack) {
  make_step(10);
  make_step(30, /*complete=*/false);
  write_latest("step-00000030\n");
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, step_path(10));
  EXPECT_NE(c.warning.find(step_path(30) + "/manifest.json is missing"), std::string::npos)
      << c.warning;
}

TEST_F(AutoResumeTest, CorruptLatestFallsBackNamingTheFile) {
  make_step(10);
  make_step(20);
  write_latest(std::string("\x07\xff../../etc", 11));
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, step_path(20));
  EXPECT_NE(c.warning.find(dir_ + "/latest: expected the name of a step directory"),
            std::string::npos)
      << c.warning;
}

TEST_F(AutoResumeTest, TemporariesOfUnfinishedSavesAreNeverChosen) {
  make_step(10);
  const std::string tmp = dir_ + "/.tmp-step-00000050-1a2b";
  fs::create_directories(tmp);
  std::ofstream(tmp + "/manifest.json") << "{}";
  fs::create_directories(dir_ + "/.old-step-00000060-3c4d");
  std::ofstream(dir_ + "/.old-step-00000060-3c4d/manifest.json") << "{}";
  EXPECT_EQ(choose().step_dir, step_path(10));
}

TEST_F(AutoResumeTest, NoCheckpointsAtAllStartsFreshQuietly) {
  const AutoResumeChoice empty = choose();
  EXPECT_EQ(empty.step_dir, "");
  EXPECT_EQ(empty.warning, "");
  make_step(10, /*complete=*/false);
  EXPECT_EQ(choose().step_dir, "");

  Result<AutoResumeChoice> absent =
      newest_complete_checkpoint(root_ + "/no-such-run/checkpoints", io::default_env());
  ASSERT_TRUE(absent.ok()) << absent.status().to_string();
  EXPECT_EQ(absent->step_dir, "");
  EXPECT_EQ(absent->warning, "");
}

TEST_F(AutoResumeTest, DanglingLatestWithNothingLeftStartsFreshWithAWarning) {
  write_latest("step-00000005\n");
  const AutoResumeChoice c = choose();
  EXPECT_EQ(c.step_dir, "");
  EXPECT_NE(c.warning.find("names step-00000005"), std::string::npos) << c.warning;
  EXPECT_NE(c.warning.find("starting fresh"), std::string::npos) << c.warning;
}

TEST_F(AutoResumeTest, ExplicitPathsStayStrict) {
  make_step(10);
  write_latest("step-00000030\n");
  EXPECT_EQ(resolve_checkpoint(dir_, io::default_env()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(resolve_checkpoint(dir_ + "/latest", io::default_env()).status().code(),
            StatusCode::kNotFound);
  EXPECT_EQ(resolve_checkpoint(step_path(10), io::default_env()).value(), step_path(10));
}

// What crashed saves, reshards and `latest` replacements leave behind is recognized by one
// predicate, listed, and removed by prune only when asked; complete checkpoints are untouched.
TEST_F(AutoResumeTest, PruneRemovesTemporariesLeftByACrash) {
  make_step(10);
  make_step(20);
  write_latest("step-00000020\n");
  const std::vector<std::string> leftovers = {".tmp-step-00000030-123456", ".old-step-00000010-9",
                                              "step-00000020.tmp.4242.00ff00ff00ff00ff"};
  for (const std::string& name : leftovers) {
    fs::create_directories(dir_ + "/" + name);
    std::ofstream(dir_ + "/" + name + "/rank-00000.data") << "partial";
  }
  std::ofstream(dir_ + "/latest.tmp.4242.0123456789abcdef") << "step-000";
  for (const std::string& name : leftovers) EXPECT_TRUE(is_temporary_name(name)) << name;
  EXPECT_TRUE(is_temporary_name("latest.tmp.4242.0123456789abcdef"));
  EXPECT_FALSE(is_temporary_name("step-00000020"));
  EXPECT_FALSE(is_temporary_name("latest"));

  Result<PruneReport> kept = prune_checkpoints(dir_, 5, false, io::default_env());
  ASSERT_TRUE(kept.ok()) << kept.status().to_string();
  EXPECT_TRUE(kept->removed.empty());
  EXPECT_TRUE(fs::exists(dir_ + "/" + leftovers[2])) << "temporaries stay unless asked";

  Result<PruneReport> removed = prune_checkpoints(dir_, 5, true, io::default_env());
  ASSERT_TRUE(removed.ok()) << removed.status().to_string();
  EXPECT_EQ(removed->removed.size(), 4u);
  for (const std::string& name : leftovers) EXPECT_FALSE(fs::exists(dir_ + "/" + name)) << name;
  EXPECT_FALSE(fs::exists(dir_ + "/latest.tmp.4242.0123456789abcdef"));
  EXPECT_TRUE(fs::exists(step_path(10) + "/manifest.json"));
  EXPECT_TRUE(fs::exists(step_path(20) + "/manifest.json"));
  EXPECT_EQ(resolve_checkpoint(dir_, io::default_env()).value(), step_path(20));
}

// A step directory that is a link to another run's checkpoint is reported and left alone, and
// the other run keeps every file; a temporary that is a link is unlinked, never followed.
TEST_F(AutoResumeTest, PruneLeavesALinkedStepDirectoryAndWhatItPointsTo) {
  const std::string other = root_ + "/other-run/checkpoints/step-00000005";
  fs::create_directories(other);
  std::ofstream(other + "/manifest.json") << "{}";
  std::ofstream(other + "/rank-00000.data") << "another run's weights";
  fs::create_directory_symlink(other, step_path(5));
  const std::string other_tmp = root_ + "/other-run/scratch";
  fs::create_directories(other_tmp);
  std::ofstream(other_tmp + "/keep.txt") << "keep";
  fs::create_directory_symlink(other_tmp, dir_ + "/.tmp-step-00000007-1");
  make_step(10);
  make_step(20);
  write_latest("step-00000020\n");

  Result<PruneReport> r = prune_checkpoints(dir_, 1, true, io::default_env());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->removed, (std::vector<std::string>{"step-00000010", ".tmp-step-00000007-1"}));
  ASSERT_EQ(r->left_alone.size(), 1u);
  EXPECT_NE(r->left_alone[0].find(step_path(5) + " is a symbolic link"), std::string::npos)
      << r->left_alone[0];
  EXPECT_TRUE(fs::is_symlink(step_path(5)));
  EXPECT_TRUE(fs::exists(other + "/manifest.json"));
  EXPECT_TRUE(fs::exists(other + "/rank-00000.data"));
  EXPECT_FALSE(fs::exists(dir_ + "/.tmp-step-00000007-1"));
  EXPECT_TRUE(fs::exists(other_tmp + "/keep.txt"));
  EXPECT_FALSE(fs::exists(step_path(10)));
  EXPECT_TRUE(fs::exists(step_path(20) + "/manifest.json"));
}

// Retention never guesses which checkpoint is the newest: a damaged `latest` stops it.
TEST_F(AutoResumeTest, PruneRefusesADamagedLatest) {
  make_step(10);
  make_step(20);
  write_latest("garbage");
  Result<PruneReport> r = prune_checkpoints(dir_, 1, false, io::default_env());
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir_ + "/latest: expected the name of a step directory"),
            std::string::npos) << r.status().message();
  EXPECT_TRUE(fs::exists(step_path(10)));
}

}  // namespace
}  // namespace ms::ckpt
