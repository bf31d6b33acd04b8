#include "supervise/machines.h"

#include <gtest/gtest.h>

namespace ms::supervise {
namespace {

TEST(MachinesTest, SingleHostSlotsAreMachines) {
  MachinePool pool = MachinePool::single_host(4);
  EXPECT_TRUE(pool.single_host_mode());
  EXPECT_EQ(pool.slots_in_use(), 4);
  pool.remove(2, "incident 1 (crash)");
  EXPECT_EQ(pool.machines_in_use(), 3);
  EXPECT_EQ(pool.rank_slots(3), (std::vector<int>{0, 1, 3}));
  EXPECT_EQ(pool.rank_slots(2), (std::vector<int>{0, 1}));
  EXPECT_EQ(pool.machine_of_slot(3), 3);
  EXPECT_EQ(pool.find("slot3"), 3);
  EXPECT_EQ(pool.excluded_text(), "slot2: incident 1 (crash)\n");
}

TEST(MachinesTest, HostfileFillsHostsInOrder) {
  auto pool = MachinePool::parse_hostfile("# cluster\nnode-a slots=2\nnode-b slots=2 max_slots=4\n"
                                          "\nnode-c  # one slot\n", "hosts");
  ASSERT_TRUE(pool.ok()) << pool.status().message();
  EXPECT_FALSE(pool->single_host_mode());
  EXPECT_EQ(pool->slots_in_use(), 5);
  EXPECT_EQ(pool->machine_of_slot(3), 1);
  EXPECT_EQ(pool->machine_of_slot(4), 2);
  pool->remove(0, "incident 1 (hang)");
  EXPECT_EQ(pool->rank_slots(3), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(pool->hostfile_text(), "node-b slots=2\nnode-c slots=1\n");
}

TEST(MachinesTest, HostfileRefusals) {
  EXPECT_NE(MachinePool::parse_hostfile("a\na\n", "h").status().message().find("h:2: host a listed twice"),
            std::string::npos);
  EXPECT_NE(MachinePool::parse_hostfile("a slots=0\n", "h").status().message().find("h:1"),
            std::string::npos);
  EXPECT_NE(MachinePool::parse_hostfile("a slots=99999999999\n", "h").status().message().find("slot count"),
            std::string::npos);
  EXPECT_NE(MachinePool::parse_hostfile("a cpus=2\n", "h").status().message().find("cpus=2"),
            std::string::npos);
  EXPECT_NE(MachinePool::parse_hostfile("# none\n", "h").status().message().find("no host"),
            std::string::npos);
}

TEST(MachinesTest, HostfileSlotsAreBoundedAndManyHostsParseQuickly) {
  // 2000 hosts of 999999 slots: the running total passes kMaxJobRanks on host 2.
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "h" + std::to_string(i) + " slots=999999\n";
  EXPECT_EQ(MachinePool::parse_hostfile(text, "h").status().message(),
            "h:2: the hostfile's slots add up to more than 1048576 ranks");
  // A large hostfile of distinct hosts parses (the duplicate check is not quadratic).
  text.clear();
  for (int i = 0; i < 200000; ++i) text += "h" + std::to_string(i) + "\n";
  Result<MachinePool> pool = MachinePool::parse_hostfile(text, "h");
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  EXPECT_EQ(pool->slots_in_use(), 200000);
}

TEST(MachinesTest, RankSlotsOfOneMachineAreBoundedByItsCpus) {
  EXPECT_TRUE(check_rank_slots(128, 2).ok());
  EXPECT_EQ(check_rank_slots(129, 2).message(),
            "--ranks 129 is more rank slots than this machine can run: at most 128 (64 per CPU, "
            "2 CPUs)");
  EXPECT_EQ(check_rank_slots(2000000000, 1 << 20).message(),
            "--ranks 2000000000 is more rank slots than this machine can run: at most 1048576 "
            "(64 per CPU, 1048576 CPUs)");
}

TEST(MachinesTest, WorldSizeKeepsTheGlobalBatch) {
  config::RunConfig config;
  config.train.global_batch = 12;
  config.train.micro_batch = 1;
  EXPECT_EQ(*choose_world_size(config, 4), 4);
  EXPECT_EQ(*choose_world_size(config, 5), 4);  // 12 is not divisible by 5
  config.parallel.tp = 2;
  config.parallel.sequence_parallel = false;
  EXPECT_EQ(*choose_world_size(config, 7), 6);  // dp 3 of tp 2
  EXPECT_FALSE(choose_world_size(config, 1).ok());
}

}  // namespace
}  // namespace ms::supervise
