// The rules every tool's output follows (io/output_path.h): never an input, never inside or
// around one, an existing output only with --replace, and a directory that appears whole or not
// at all, with a full disk or a failed rename leaving the old output as it was.
#include "io/output_path.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "io/atomic_file.h"
#include "io/fault_env.h"
#include "tests/io/temp_dir.h"

namespace ms::io {
namespace {

using testing::TempDir;

class OutputPathTest : public ::testing::Test {
 protected:
  void write(const std::string& path, const std::string& text) {
    ASSERT_TRUE(default_env().create_dirs(parent_dir(path)).ok());
    ASSERT_TRUE(write_file_atomic(path, text).ok());
  }
  std::string read(const std::string& path) {
    Result<std::string> text = read_file(path);
    return text.ok() ? *text : "<" + text.status().message() + ">";
  }
  // Names in dir_ other than the ones given: temporaries or moved-aside outputs left behind.
  std::vector<std::string> leftovers(const std::vector<std::string>& expected) {
    std::vector<std::string> names = *default_env().list_dir(dir_.path());
    std::erase_if(names, [&](const std::string& n) {
      return std::find(expected.begin(), expected.end(), n) != expected.end();
    });
    return names;
  }

  TempDir dir_;
};

TEST_F(OutputPathTest, AnOutputThatIsContainsOrIsInsideAnInputIsRefusedNamingBoth) {
  const std::string model = dir_.file("model");
  write(model + "/config.json", "{}");
  struct Case {
    std::string output, relation;
  };
  const std::vector<Case> cases = {{model, "is"},
                                   {model + "/", "is"},
                                   {dir_.file("./model/../model"), "is"},
                                   {model + "/quantized", "is inside"},
                                   {dir_.path(), "contains"}};
  for (const Case& c : cases) {
    Status st = check_output_is_not_an_input(c.output, {{model}, "-o", false});
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument) << c.output;
    EXPECT_NE(st.message().find("-o " + c.output + " " + c.relation + " the input " + model),
              std::string::npos) << st.message();
  }
  EXPECT_TRUE(check_output_is_not_an_input(dir_.file("model-int8"), {{model}}).ok())
      << "a sibling whose name starts with the input's is not inside it";
}

TEST_F(OutputPathTest, ALinkToAnInputIsThatInput) {
  const std::string model = dir_.file("model");
  write(model + "/config.json", "{}");
  ASSERT_EQ(::symlink(model.c_str(), dir_.file("alias").c_str()), 0);
  Status st = check_output_is_not_an_input(dir_.file("alias"), {{model}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  st = check_output_is_not_an_input(dir_.file("alias/sub"), {{model}});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
}

TEST_F(OutputPathTest, AnExistingOutputFileNeedsReplace) {
  const std::string plan = dir_.file("mix.plan");
  EXPECT_TRUE(check_output_file(default_env(), plan, {}).ok());
  write(plan, "old");
  Status st = check_output_file(default_env(), plan, {{}, "--output", false});
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(st.message().find("--replace"), std::string::npos) << st.message();
  EXPECT_TRUE(check_output_file(default_env(), plan, {{}, "--output", true}).ok());
  EXPECT_EQ(check_output_file(default_env(), dir_.path(), {{}, "--output", true}).code(),
            StatusCode::kAlreadyExists) << "a directory is never replaced by a file";
}

// An output file is renamed into place, which would replace a device or a fifo by the output
// (`--output /dev/null --replace` as root replaced /dev/null); they are refused, replace or not.
TEST_F(OutputPathTest, AnOutputThatIsNotARegularFileIsRefusedEvenWithReplace) {
  const std::string fifo = dir_.file("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (bool replace : {false, true}) {
    const Status st = check_output_file(default_env(), fifo, {{}, "--output", replace});
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find("--output " + fifo + " is a FIFO, not a regular file"), std::string::npos)
        << st.message();
  }
  EXPECT_TRUE(default_env().exists(fifo));
}

TEST_F(OutputPathTest, ADirectoryAppearsOnlyWhenCommitted) {
  const std::string out = dir_.file("out");
  {
    auto staged = StagedDirectory::create(default_env(), out + "/", {});
    ASSERT_TRUE(staged.ok()) << staged.status().to_string();
    EXPECT_EQ((*staged)->final_path(), out);
    EXPECT_TRUE(path_is_within((*staged)->path(), dir_.path()));
    EXPECT_FALSE(path_is_within((*staged)->path(), out)) << "the staging is a sibling";
    write((*staged)->path() + "/a.json", "new");
    EXPECT_FALSE(default_env().exists(out));
  }
  EXPECT_FALSE(default_env().exists(out)) << "abandoned: nothing published";
  EXPECT_TRUE(leftovers({}).empty()) << "the temporary is removed";

  auto staged = StagedDirectory::create(default_env(), out, {});
  ASSERT_TRUE(staged.ok());
  write((*staged)->path() + "/a.json", "new");
  ASSERT_TRUE((*staged)->commit().ok());
  EXPECT_EQ(read(out + "/a.json"), "new");
  EXPECT_TRUE(leftovers({"out"}).empty());
}

TEST_F(OutputPathTest, ANonEmptyOutputIsRefusedUnlessReplacedAndThenReplacedWhole) {
  const std::string out = dir_.file("out");
  write(out + "/old-only.json", "old");
  write(out + "/shared.json", "old");
  Result<std::unique_ptr<StagedDirectory>> refused = StagedDirectory::create(default_env(), out, {});
  ASSERT_EQ(refused.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(refused.status().message().find("exists and is not empty (2 entries)"),
            std::string::npos) << refused.status().message();

  auto staged = StagedDirectory::create(default_env(), out, {{}, "--output", true});
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  write((*staged)->path() + "/shared.json", "new");
  ASSERT_TRUE((*staged)->commit().ok());
  EXPECT_EQ(read(out + "/shared.json"), "new");
  EXPECT_FALSE(default_env().exists(out + "/old-only.json")) << "no mix of old and new files";
  EXPECT_TRUE(leftovers({"out"}).empty()) << "the old output is removed after the commit";
}

TEST_F(OutputPathTest, AnEmptyDirectoryOrAFileInTheWayAreHandled) {
  ASSERT_TRUE(default_env().create_dir(dir_.file("empty")).ok());
  auto staged = StagedDirectory::create(default_env(), dir_.file("empty"), {});
  ASSERT_TRUE(staged.ok()) << staged.status().to_string();
  ASSERT_TRUE((*staged)->commit().ok());
  write(dir_.file("file"), "x");
  EXPECT_EQ(StagedDirectory::create(default_env(), dir_.file("file"), {{}, "-o", true})
                .status().code(), StatusCode::kAlreadyExists);
}

// A full disk while the new output is written, then a failed fsync while it is published:
// each time the old output stays whole and nothing else is left.
TEST_F(OutputPathTest, AFailureLeavesTheOldOutputWhole) {
  const std::string out = dir_.file("out");
  write(out + "/weights", "old weights");
  FaultInjectingEnv faulty(default_env());
  {
    auto staged = StagedDirectory::create(faulty, out, {{}, "-o", true});
    ASSERT_TRUE(staged.ok());
    faulty.enospc_after(4);
    EXPECT_FALSE(write_file_atomic(faulty, (*staged)->path() + "/weights", "new weights").ok());
    faulty.clear_faults();
  }
  EXPECT_EQ(read(out + "/weights"), "old weights");
  EXPECT_TRUE(leftovers({"out"}).empty());

  auto staged = StagedDirectory::create(faulty, out, {{}, "-o", true});
  ASSERT_TRUE(staged.ok());
  ASSERT_TRUE(write_file_atomic(faulty, (*staged)->path() + "/weights", "new weights").ok());
  faulty.fail_nth_dir_sync_of(dir_.path(), 1);
  Status st = (*staged)->commit();
  EXPECT_FALSE(st.ok());
  faulty.clear_faults();
  staged->reset();
  EXPECT_EQ(read(out + "/weights"), "old weights");
  EXPECT_TRUE(leftovers({"out"}).empty());
}

}  // namespace
}  // namespace ms::io
