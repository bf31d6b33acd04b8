// Host metrics for telemetry "host" records and for diagnosis: CPU utilization, memory, network
// byte counters and this process's resident memory, read from Linux /proc. Each parser takes
// the file's text (and the name to use in errors), so tests feed crafted contents; malformed
// text is a Corruption error naming the file and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms {

// Aggregate jiffies from the "cpu" line of /proc/stat. Idle time counts idle and iowait; busy
// is everything else up to steal (guest time is already inside user time).
struct CpuTimes {
  uint64_t busy = 0;
  uint64_t total = 0;
};
Result<CpuTimes> parse_proc_stat(std::string_view text, std::string_view source = "/proc/stat");
// Fraction of time busy between two readings, in [0, 1]; 0 when no time passed.
double cpu_utilization(const CpuTimes& before, const CpuTimes& after);

// From MemTotal and MemAvailable of /proc/meminfo; used = total - available.
struct MemInfo {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;
  uint64_t used_bytes = 0;
};
Result<MemInfo> parse_meminfo(std::string_view text, std::string_view source = "/proc/meminfo");

// Received and transmitted bytes since boot, summed over every interface except loopback "lo".
struct NetBytes {
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
};
Result<NetBytes> parse_net_dev(std::string_view text, std::string_view source = "/proc/net/dev");

// Resident set size in bytes, from the VmRSS line of /proc/self/status.
Result<uint64_t> parse_rss_bytes(std::string_view text,
                                 std::string_view source = "/proc/self/status");
// The peak resident set size in bytes (the VmHWM line).
Result<uint64_t> parse_peak_rss_bytes(std::string_view text,
                                      std::string_view source = "/proc/self/status");

// CPU seconds (user + system) this process has used, from /proc/self/stat: fields 14 and 15
// after the parenthesized command name (which may itself hold spaces and parentheses), in
// clock ticks of `ticks_per_second`.
Result<double> parse_process_cpu_seconds(std::string_view text, double ticks_per_second,
                                         std::string_view source = "/proc/self/stat");

// Reads a whole text file (works for /proc files, whose size reads as 0).
Result<std::string> read_text_file(const std::string& path);

struct HostMetrics {
  double cpu_util = 0;  // busy fraction since the previous sample (since boot for the first)
  uint64_t mem_used = 0;
  uint64_t mem_total = 0;
  uint64_t mem_available = 0;
  uint64_t net_rx_bytes = 0;  // cumulative counters; readers difference them for rates
  uint64_t net_tx_bytes = 0;
  uint64_t rss_bytes = 0;
  // This process's CPU use: cumulative seconds, and busy fraction of one core since the previous
  // sample (0 for the first). On a machine shared by several ranks the host figures above are
  // the same for all of them; these tell the ranks apart (a rank that stalls uses less CPU).
  double proc_cpu_seconds = 0;
  double proc_cpu_util = 0;
};

// This machine's physical memory in bytes (sysconf); 0 when the system does not say.
uint64_t physical_memory_bytes();

// The share of physical memory one data structure sized by a user's number (a flag, a config
// key, a count read from a file) may take: half, so that the process, the page cache and the
// other ranks on the machine keep the rest.
inline constexpr double kMaxMemoryShare = 0.5;

// Checks a count from a flag or file before it sizes an allocation: OK when `bytes` (computed
// in double, so no product of user numbers wraps) is finite and fits kMaxMemoryShare of
// `physical_bytes`; otherwise InvalidArgument "<what> needs N bytes (G GiB), more than half of
// this machine's M GiB of memory", `what` naming the flag or key and what it sizes.
Status check_memory_need(double bytes, std::string_view what, uint64_t physical_bytes);
Status check_memory_need(double bytes, std::string_view what);

// Takes successive host samples. `proc_root` is "/proc" except in tests, which point it at a
// directory holding stat, meminfo, net/dev, self/status and self/stat files.
class HostMetricsSampler {
 public:
  explicit HostMetricsSampler(std::string proc_root = "/proc") : proc_root_(std::move(proc_root)) {}
  // Reads all four files; any unreadable or malformed file is an error naming it, and leaves
  // the previous CPU reading in place.
  Result<HostMetrics> sample();

 private:
  std::string proc_root_;
  CpuTimes previous_cpu_;
  double previous_proc_cpu_s_ = -1;  // < 0 before the first sample
  double previous_wall_s_ = 0;
};

}  // namespace ms
