#include "core/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ms::log {
namespace {

struct LoggerState {
  std::mutex mu;
  std::atomic<int> level{static_cast<int>(Level::kInfo)};
  std::atomic<bool> all_ranks{false};
  std::atomic<int> rank{0};
  std::string host;
  std::FILE* file = nullptr;
};

LoggerState& state() {
  static LoggerState* s = [] {
    auto* st = new LoggerState();  // never destroyed: logging must work during static teardown
    char name[256] = {0};
    if (gethostname(name, sizeof(name) - 1) == 0) st->host = name;
    if (st->host.empty()) st->host = "localhost";
    return st;
  }();
  return *s;
}

char level_letter(Level level) {
  switch (level) {
    case Level::kDebug: return 'D';
    case Level::kInfo: return 'I';
    case Level::kWarn: return 'W';
    case Level::kError: return 'E';
    case Level::kOff: return '-';
  }
  return '?';
}

std::string timestamp_utc() {
  auto now = std::chrono::system_clock::now();
  auto secs = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms));
  return buf;
}

}  // namespace

Result<Level> parse_level(std::string_view text) {
  std::string t(text);
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "debug") return Level::kDebug;
  if (t == "info") return Level::kInfo;
  if (t == "warn" || t == "warning") return Level::kWarn;
  if (t == "error") return Level::kError;
  if (t == "off") return Level::kOff;
  return InvalidArgument("unknown log level '" + std::string(text) +
                         "' (expected debug, info, warn, error or off)");
}

std::string_view level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "unknown";
}

void set_level(Level level) { state().level = static_cast<int>(level); }
Level level() { return static_cast<Level>(state().level.load()); }

void set_identity(std::string host, int rank) {
  LoggerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!host.empty()) s.host = std::move(host);
  s.rank = rank;
}

int rank() { return state().rank.load(); }
const std::string& host() { return state().host; }
void set_all_ranks(bool all_ranks) { state().all_ranks = all_ranks; }

Status set_log_file(const std::string& path) {
  LoggerState& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.file) std::fclose(s.file);
  s.file = nullptr;
  if (path.empty()) return Status::OK();
  s.file = std::fopen(path.c_str(), "a");
  if (!s.file) return ErrnoError("cannot open log file", path, errno);
  return Status::OK();
}

bool enabled(Level lvl) {
  const LoggerState& s = state();
  if (static_cast<int>(lvl) < s.level.load()) return false;
  if (lvl <= Level::kInfo && s.rank.load() != 0 && !s.all_ranks.load()) return false;
  return true;
}

void write(Level lvl, std::string_view message) {
  LoggerState& s = state();
  std::string line = timestamp_utc();
  line += ' ';
  line += level_letter(lvl);
  line += ' ';
  std::lock_guard<std::mutex> lock(s.mu);
  line += s.host;
  line += " r";
  line += std::to_string(s.rank.load());
  line += "] ";
  line += message;
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
  if (s.file) {
    std::fwrite(line.data(), 1, line.size(), s.file);
    std::fflush(s.file);
  }
}

}  // namespace ms::log
