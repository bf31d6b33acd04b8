#include "supervise/job_command.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace ms::supervise {
namespace {

TEST(JobCommandTest, FindsMsTrainAndItsConfig) {
  auto job = parse_job_command({"mpirun", "-np", "{np}", "--hostfile", "{hostfile}",
                                "/opt/ms/bin/ms-train", "--config", "run.yaml", "--set",
                                "train.steps=9", "--set=run.dir=/x"});
  ASSERT_TRUE(job.ok()) << job.status().message();
  EXPECT_EQ(job->train_at, 5u);
  EXPECT_EQ(job->config_path, "run.yaml");
  EXPECT_EQ(job->sets, (std::vector<std::string>{"train.steps=9", "run.dir=/x"}));
  EXPECT_TRUE(job->uses_hostfile);
  const auto argv = render_job_command(*job, 3, "/s/hostfile", {"checkpoint.resume=auto"});
  EXPECT_EQ(argv[2], "3");
  EXPECT_EQ(argv[4], "/s/hostfile");
  EXPECT_EQ(argv[argv.size() - 2], "--set");
  EXPECT_EQ(argv.back(), "checkpoint.resume=auto");
}

TEST(JobCommandTest, PlaceholderInsideAnArgument) {
  auto job = parse_job_command({"srun", "--ntasks={np}", "ms-train", "--config=a.yaml"});
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->config_path, "a.yaml");
  EXPECT_FALSE(job->uses_hostfile);
  EXPECT_EQ(render_job_command(*job, 12, "", {})[1], "--ntasks=12");
}

TEST(JobCommandTest, Refusals) {
  EXPECT_NE(parse_job_command({"mpirun", "-np", "{np}", "python", "train.py"})
                .status().message().find("no ms-train"), std::string::npos);
  EXPECT_NE(parse_job_command({"mpirun", "-np", "4", "ms-train", "--config", "a.yaml"})
                .status().message().find("{np}"), std::string::npos);
  EXPECT_NE(parse_job_command({"mpirun", "-np", "{np}", "ms-train"})
                .status().message().find("--config"), std::string::npos);
}

TEST(JobCommandTest, LoadsTheConfigWithTheJobsSets) {
  const std::string path = testing::TempDir() + "/job_command_test.yaml";
  std::ofstream(path) << "train:\n  steps: 7\n";
  auto job = parse_job_command({"mpirun", "-np", "{np}", "ms-train", "--config", path, "--set",
                                "train.global_batch=12"});
  ASSERT_TRUE(job.ok());
  auto config = load_job_config(*job, {"train.micro_batch=3"});
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(config->train.steps, 7);
  EXPECT_EQ(config->train.global_batch, 12);
  EXPECT_EQ(config->train.micro_batch, 3);
}

TEST(JobCommandTest, ShellLine) {
  EXPECT_EQ(shell_line({"mpirun", "-np", "{np}", "a b", "it's"}),
            "mpirun -np {np} 'a b' 'it'\\''s'");
}

}  // namespace
}  // namespace ms::supervise
