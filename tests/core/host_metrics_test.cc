// Host metrics: parsing crafted /proc text (good and malformed) and a real sample.
#include "core/host_metrics.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace ms {
namespace {

constexpr const char* kStat =
    "cpu  100 10 40 800 50 0 0 0 30 0\n"
    "cpu0 50 5 20 400 25 0 0 0 15 0\n"
    "intr 12345\n";

constexpr const char* kMeminfo =
    "MemTotal:       16000000 kB\n"
    "MemFree:         1000000 kB\n"
    "MemAvailable:    4000000 kB\n"
    "Buffers:          100000 kB\n";

constexpr const char* kNetDev =
    "Inter-|   Receive                                                |  Transmit\n"
    " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
    "    lo: 5000 10 0 0 0 0 0 0 5000 10 0 0 0 0 0 0\n"
    "  eth0: 1000 20 0 0 0 0 0 0 2000 30 0 0 0 0 0 0\n"
    "  ib0:300 5 0 0 0 0 0 0 400 6 0 0 0 0 0 0\n";

constexpr const char* kSelfStatus =
    "Name:\tms-train\n"
    "VmPeak:\t  200000 kB\n"
    "VmHWM:\t   23456 kB\n"
    "VmRSS:\t   12345 kB\n";

TEST(ProcStat, BusyExcludesIdleAndIowaitAndGuestIsNotCountedTwice) {
  Result<CpuTimes> t = parse_proc_stat(kStat);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->total, 1000u);  // user..steal; guest (30) is inside user already
  EXPECT_EQ(t->busy, 150u);
}

TEST(ProcStat, UtilizationIsTheBusyShareBetweenReadings) {
  EXPECT_DOUBLE_EQ(cpu_utilization({100, 1000}, {175, 1100}), 0.75);
  EXPECT_DOUBLE_EQ(cpu_utilization({100, 1000}, {100, 1000}), 0.0);
  EXPECT_DOUBLE_EQ(cpu_utilization({}, {150, 1000}), 0.15);
}

TEST(ProcStat, MalformedTextIsACorruptionNamingTheFile) {
  Result<CpuTimes> r = parse_proc_stat("intr 1 2 3\n");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("/proc/stat"), std::string::npos);
  EXPECT_FALSE(parse_proc_stat("cpu 1 2 x 4\n").ok());
  EXPECT_FALSE(parse_proc_stat("cpu 1 2\n").ok());
  EXPECT_FALSE(parse_proc_stat("").ok());
}

TEST(Meminfo, UsedIsTotalMinusAvailable) {
  Result<MemInfo> m = parse_meminfo(kMeminfo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->total_bytes, 16000000ull * 1024);
  EXPECT_EQ(m->available_bytes, 4000000ull * 1024);
  EXPECT_EQ(m->used_bytes, 12000000ull * 1024);
}

TEST(Meminfo, MissingOrMalformedFieldsAreErrorsNamingFileAndField) {
  Result<MemInfo> missing = parse_meminfo("MemTotal: 100 kB\n", "/fake/meminfo");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "malformed /fake/meminfo: no 'MemAvailable:' line");
  Result<MemInfo> bad = parse_meminfo("MemTotal: lots kB\nMemAvailable: 1 kB\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("MemTotal: <number> kB"), std::string::npos);
}

TEST(NetDev, SumsEveryInterfaceButLoopback) {
  Result<NetBytes> n = parse_net_dev(kNetDev);
  ASSERT_TRUE(n.ok()) << n.status().to_string();
  EXPECT_EQ(n->rx_bytes, 1300u);
  EXPECT_EQ(n->tx_bytes, 2400u);
}

TEST(NetDev, TruncatedCountersAreAnError) {
  Result<NetBytes> n = parse_net_dev("  eth0: 1 2 3\n");
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), StatusCode::kCorruption);
  EXPECT_NE(n.status().message().find("/proc/net/dev"), std::string::npos);
  EXPECT_FALSE(parse_net_dev("garbage line\n").ok());
}

TEST(SelfStatus, ReadsVmRSS) {
  Result<uint64_t> rss = parse_rss_bytes(kSelfStatus);
  ASSERT_TRUE(rss.ok());
  EXPECT_EQ(*rss, 12345ull * 1024);
  EXPECT_FALSE(parse_rss_bytes("Name: x\n").ok());
}

TEST(SelfStatus, ReadsThePeakVmHWM) {
  Result<uint64_t> peak = parse_peak_rss_bytes(kSelfStatus);
  ASSERT_TRUE(peak.ok());
  EXPECT_EQ(*peak, 23456ull * 1024);
  EXPECT_FALSE(parse_peak_rss_bytes("VmRSS:\t 1 kB\n").ok());
}

// A command name with spaces and parentheses, utime 250 and stime 50 ticks.
constexpr char kSelfStat[] =
    "4242 (ms train (r1)) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 3 0 100 0 0\n";

TEST(HostMetrics, ParsesProcessCpuSecondsAfterTheCommandName) {
  Result<double> seconds = parse_process_cpu_seconds(kSelfStat, 100.0);
  ASSERT_TRUE(seconds.ok()) << seconds.status().to_string();
  EXPECT_DOUBLE_EQ(*seconds, 3.0);
  EXPECT_FALSE(parse_process_cpu_seconds("4242 no-parens S 1", 100.0).ok());
  Result<double> short_line = parse_process_cpu_seconds("1 (x) S 1 2 3", 100.0, "/p/self/stat");
  ASSERT_FALSE(short_line.ok());
  EXPECT_NE(short_line.status().message().find("/p/self/stat"), std::string::npos);
  EXPECT_FALSE(parse_process_cpu_seconds("1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 5", 100.0).ok());
}

// A fake /proc tree in a temporary directory, removed at the end.
class FakeProc : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("ms_core_fake_proc_" + std::to_string(::getpid()));
    std::filesystem::create_directories(root_ / "net");
    std::filesystem::create_directories(root_ / "self");
    write("stat", kStat);
    write("meminfo", kMeminfo);
    write("net/dev", kNetDev);
    write("self/status", kSelfStatus);
    write("self/stat", kSelfStat);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void write(const std::string& name, const std::string& text) {
    std::ofstream(root_ / name) << text;
  }
  std::filesystem::path root_;
};

TEST_F(FakeProc, SamplerCombinesAllFilesAndDifferencesCpuTimes) {
  HostMetricsSampler sampler(root_.string());
  Result<HostMetrics> first = sampler.sample();
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_DOUBLE_EQ(first->cpu_util, 0.15);  // since boot
  EXPECT_EQ(first->mem_total, 16000000ull * 1024);
  EXPECT_EQ(first->net_tx_bytes, 2400u);
  EXPECT_EQ(first->rss_bytes, 12345ull * 1024);
  EXPECT_DOUBLE_EQ(first->proc_cpu_seconds, 300.0 / static_cast<double>(sysconf(_SC_CLK_TCK)));
  EXPECT_EQ(first->proc_cpu_util, 0.0);  // no previous sample
  write("stat", "cpu  150 10 40 850 50 0 0 0 0 0\n");  // +50 busy of +100 total
  Result<HostMetrics> second = sampler.sample();
  ASSERT_TRUE(second.ok());
  EXPECT_DOUBLE_EQ(second->cpu_util, 0.5);
}

TEST_F(FakeProc, MissingFileIsAnIOErrorNamingIt) {
  std::filesystem::remove(root_ / "net" / "dev");
  Result<HostMetrics> r = HostMetricsSampler(root_.string()).sample();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_NE(r.status().message().find((root_ / "net" / "dev").string()), std::string::npos);
}

TEST_F(FakeProc, MalformedFileIsACorruptionNamingIt) {
  write("meminfo", "nonsense\n");
  Result<HostMetrics> r = HostMetricsSampler(root_.string()).sample();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find((root_ / "meminfo").string()), std::string::npos);
}

TEST(HostMetricsSampler, SamplesThisMachine) {
  HostMetricsSampler sampler;
  ASSERT_TRUE(sampler.sample().ok());
  Result<HostMetrics> m = sampler.sample();
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_GE(m->cpu_util, 0.0);
  EXPECT_LE(m->cpu_util, 1.0);
  EXPECT_GT(m->mem_total, 0u);
  EXPECT_LE(m->mem_used, m->mem_total);
  EXPECT_GT(m->rss_bytes, 0u);
}

// A count from a flag or a file is checked in double before it sizes anything: half of the
// machine's memory at most, and never a NaN or an infinity (which compare false with any
// limit) or a negative product.
TEST(MemoryNeed, RefusesWhatHalfThePhysicalMemoryCannotHoldNamingWhat) {
  const uint64_t gib = uint64_t{1} << 30;
  EXPECT_TRUE(check_memory_need(4.0 * gib, "--x", 8 * gib).ok());
  const Status over = check_memory_need(4.5 * gib, "--calibration-samples 100", 8 * gib);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message(),
            "--calibration-samples 100 needs 4.832e+09 bytes (4.5 GiB), more than half of this "
            "machine's 8 GiB of memory");
  EXPECT_FALSE(check_memory_need(std::nan(""), "--x", 8 * gib).ok());
  EXPECT_FALSE(check_memory_need(HUGE_VAL, "--x", 8 * gib).ok());
  EXPECT_FALSE(check_memory_need(-1, "--x", 8 * gib).ok());
  EXPECT_GT(physical_memory_bytes(), 0u);
  EXPECT_FALSE(check_memory_need(1e30, "total_samples").ok());
}

}  // namespace
}  // namespace ms
