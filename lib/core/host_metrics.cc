#include "core/host_metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/timer.h"

namespace ms {
namespace {

std::vector<std::string_view> split_whitespace(std::string_view line) {
  std::vector<std::string_view> words;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) words.push_back(line.substr(start, i - start));
  }
  return words;
}

// Calls on_line(line) for each line; stops early when it returns false.
template <typename Fn>
void for_each_line(std::string_view text, Fn on_line) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (!on_line(line) || end == std::string_view::npos) return;
    text.remove_prefix(end + 1);
  }
}

bool parse_u64(std::string_view word, uint64_t& out) {
  const auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), out);
  return ec == std::errc() && ptr == word.data() + word.size();
}

Status malformed(std::string_view source, std::string_view what) {
  return Corruption("malformed " + std::string(source) + ": " + std::string(what));
}

// Value in bytes of a "Key:   1234 kB" line of /proc/meminfo or /proc/self/status.
Result<uint64_t> find_kb_field(std::string_view text, std::string_view key,
                               std::string_view source) {
  Result<uint64_t> result = malformed(source, "no '" + std::string(key) + ":' line");
  for_each_line(text, [&](std::string_view line) {
    const std::vector<std::string_view> words = split_whitespace(line);
    if (words.empty() || words[0] != std::string(key) + ":") return true;
    uint64_t kb = 0;
    if (words.size() != 3 || words[2] != "kB" || !parse_u64(words[1], kb)) {
      result = malformed(source, "expected '" + std::string(key) + ": <number> kB', got '" +
                                     std::string(line) + "'");
    } else {
      result = kb * 1024;
    }
    return false;
  });
  return result;
}

}  // namespace

Result<CpuTimes> parse_proc_stat(std::string_view text, std::string_view source) {
  const std::string_view first_line = text.substr(0, text.find('\n'));
  const std::vector<std::string_view> words = split_whitespace(first_line);
  if (words.empty() || words[0] != "cpu") {
    return malformed(source, "first line should start with 'cpu', got '" +
                                 std::string(first_line) + "'");
  }
  if (words.size() < 5) return malformed(source, "the 'cpu' line has fewer than 4 counters");
  // user nice system idle iowait irq softirq steal [guest guest_nice]
  const size_t counted = std::min<size_t>(words.size() - 1, 8);
  CpuTimes times;
  uint64_t idle = 0;
  for (size_t i = 0; i < counted; ++i) {
    uint64_t value = 0;
    if (!parse_u64(words[i + 1], value)) {
      return malformed(source, "'cpu' counter '" + std::string(words[i + 1]) + "' is not a number");
    }
    times.total += value;
    if (i == 3 || i == 4) idle += value;
  }
  times.busy = times.total - idle;
  return times;
}

double cpu_utilization(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.busy < before.busy) return 0.0;
  const double busy = static_cast<double>(after.busy - before.busy);
  const double total = static_cast<double>(after.total - before.total);
  return std::min(1.0, busy / total);
}

Result<MemInfo> parse_meminfo(std::string_view text, std::string_view source) {
  MS_ASSIGN_OR_RETURN(uint64_t total, find_kb_field(text, "MemTotal", source));
  MS_ASSIGN_OR_RETURN(uint64_t available, find_kb_field(text, "MemAvailable", source));
  if (available > total) return malformed(source, "MemAvailable exceeds MemTotal");
  return MemInfo{total, available, total - available};
}

Result<NetBytes> parse_net_dev(std::string_view text, std::string_view source) {
  NetBytes sum;
  Status status;
  for_each_line(text, [&](std::string_view line) {
    if (line.find('|') != std::string_view::npos || split_whitespace(line).empty()) return true;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      status = malformed(source, "expected '<interface>: <counters>', got '" + std::string(line) + "'");
      return false;
    }
    const std::vector<std::string_view> name = split_whitespace(line.substr(0, colon));
    const std::vector<std::string_view> counters = split_whitespace(line.substr(colon + 1));
    uint64_t rx = 0, tx = 0;
    if (name.size() != 1 || counters.size() < 9 || !parse_u64(counters[0], rx) ||
        !parse_u64(counters[8], tx)) {
      status = malformed(source, "cannot read the byte counters of '" + std::string(line) + "'");
      return false;
    }
    if (name[0] != "lo") {
      sum.rx_bytes += rx;
      sum.tx_bytes += tx;
    }
    return true;
  });
  if (!status.ok()) return status;
  return sum;
}

Result<uint64_t> parse_rss_bytes(std::string_view text, std::string_view source) {
  return find_kb_field(text, "VmRSS", source);
}

Result<uint64_t> parse_peak_rss_bytes(std::string_view text, std::string_view source) {
  return find_kb_field(text, "VmHWM", source);
}

Result<double> parse_process_cpu_seconds(std::string_view text, double ticks_per_second,
                                         std::string_view source) {
  const size_t name_end = text.rfind(')');
  if (name_end == std::string_view::npos) {
    return Corruption(std::string(source) + ": no ')' closing the command name");
  }
  std::istringstream fields{std::string(text.substr(name_end + 1))};
  // After the name: state (field 3), ppid, ..., utime (field 14), stime (field 15).
  std::string field;
  double ticks = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index < 14) continue;
    char* end = nullptr;
    const double value = std::strtod(field.c_str(), &end);
    if (end == field.c_str() || *end != '\0' || value < 0) {
      return Corruption(std::string(source) + ": field " + std::to_string(index) + " is '" +
                        field + "', expected a tick count");
    }
    ticks += value;
    if (index == 15) return ticks / ticks_per_second;
  }
  return Corruption(std::string(source) + ": fewer than 15 fields");
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrnoError("cannot open", path, errno);
  std::ostringstream contents;
  contents << in.rdbuf();
  if (in.bad()) return ErrnoError("cannot read", path, errno);
  return contents.str();
}

Result<HostMetrics> HostMetricsSampler::sample() {
  const std::string stat_path = proc_root_ + "/stat";
  const std::string meminfo_path = proc_root_ + "/meminfo";
  const std::string net_path = proc_root_ + "/net/dev";
  const std::string status_path = proc_root_ + "/self/status";
  MS_ASSIGN_OR_RETURN(std::string stat_text, read_text_file(stat_path));
  MS_ASSIGN_OR_RETURN(CpuTimes cpu, parse_proc_stat(stat_text, stat_path));
  MS_ASSIGN_OR_RETURN(std::string meminfo_text, read_text_file(meminfo_path));
  MS_ASSIGN_OR_RETURN(MemInfo mem, parse_meminfo(meminfo_text, meminfo_path));
  MS_ASSIGN_OR_RETURN(std::string net_text, read_text_file(net_path));
  MS_ASSIGN_OR_RETURN(NetBytes net, parse_net_dev(net_text, net_path));
  MS_ASSIGN_OR_RETURN(std::string status_text, read_text_file(status_path));
  MS_ASSIGN_OR_RETURN(uint64_t rss, parse_rss_bytes(status_text, status_path));
  const std::string self_stat_path = proc_root_ + "/self/stat";
  MS_ASSIGN_OR_RETURN(std::string self_stat_text, read_text_file(self_stat_path));
  MS_ASSIGN_OR_RETURN(double proc_cpu_s,
                      parse_process_cpu_seconds(self_stat_text,
                                                static_cast<double>(sysconf(_SC_CLK_TCK)),
                                                self_stat_path));

  HostMetrics m;
  m.cpu_util = cpu_utilization(previous_cpu_, cpu);
  previous_cpu_ = cpu;
  m.mem_used = mem.used_bytes;
  m.mem_total = mem.total_bytes;
  m.mem_available = mem.available_bytes;
  m.net_rx_bytes = net.rx_bytes;
  m.net_tx_bytes = net.tx_bytes;
  m.rss_bytes = rss;
  const double now = wall_time_s();
  m.proc_cpu_seconds = proc_cpu_s;
  if (previous_proc_cpu_s_ >= 0 && now > previous_wall_s_) {
    m.proc_cpu_util = std::max(0.0, proc_cpu_s - previous_proc_cpu_s_) / (now - previous_wall_s_);
  }
  previous_proc_cpu_s_ = proc_cpu_s;
  previous_wall_s_ = now;
  return m;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

Status check_memory_need(double bytes, std::string_view what, uint64_t physical_bytes) {
  const double limit = kMaxMemoryShare * static_cast<double>(physical_bytes);
  if (std::isfinite(bytes) && bytes >= 0 && (physical_bytes == 0 || bytes <= limit)) {
    return Status::OK();
  }
  char text[160];
  std::snprintf(text, sizeof(text),
                " needs %.4g bytes (%.3g GiB), more than half of this "
                "machine's %.3g GiB of memory",
                bytes, bytes / 1073741824.0, static_cast<double>(physical_bytes) / 1073741824.0);
  return InvalidArgument(std::string(what) + text);
}

Status check_memory_need(double bytes, std::string_view what) {
  return check_memory_need(bytes, what, physical_memory_bytes());
}

}  // namespace ms
