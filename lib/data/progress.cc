// Progress lines: formatting is a pure function (tested); printing picks '\r' redraws or log
// lines once at construction.
#include "data/progress.h"

#include <unistd.h>

#include <cstdio>

#include "core/logging.h"

namespace ms::data {
namespace {

std::string format_amount(double value, const std::string& unit) {
  char text[64];
  if (unit != "B") {
    if (value >= 1e9) std::snprintf(text, sizeof(text), "%.2fG %s", value / 1e9, unit.c_str());
    else if (value >= 1e6) std::snprintf(text, sizeof(text), "%.2fM %s", value / 1e6, unit.c_str());
    else std::snprintf(text, sizeof(text), "%.0f %s", value, unit.c_str());
    return text;
  }
  if (value >= 1e9) std::snprintf(text, sizeof(text), "%.2f GB", value / 1e9);
  else if (value >= 1e6) std::snprintf(text, sizeof(text), "%.2f MB", value / 1e6);
  else if (value >= 1e3) std::snprintf(text, sizeof(text), "%.1f KB", value / 1e3);
  else std::snprintf(text, sizeof(text), "%.0f B", value);
  return text;
}

std::string format_duration(double seconds) {
  const long s = static_cast<long>(seconds + 0.5);
  char text[32];
  std::snprintf(text, sizeof(text), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return text;
}

}  // namespace

Progress::Progress(std::string what, uint64_t total, ProgressOptions options)
    : what_(std::move(what)), total_(total), options_(std::move(options)) {
  using Style = ProgressOptions::Style;
  terminal_ = options_.style == Style::kTerminal ||
              (options_.style == Style::kAuto && isatty(STDERR_FILENO) == 1);
}

Progress::~Progress() { finish(); }

std::string Progress::format_line(const std::string& what, uint64_t done, uint64_t total,
                                  double elapsed_s, const std::string& unit,
                                  const std::string& detail) {
  std::string line = what + ": " + format_amount(static_cast<double>(done), unit);
  if (total > 0) {
    char percent[32];
    std::snprintf(percent, sizeof(percent), " (%.1f%%)", 100.0 * static_cast<double>(done) / static_cast<double>(total));
    line += " / " + format_amount(static_cast<double>(total), unit) + percent;
  }
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  line += ", " + format_amount(rate, unit) + "/s";
  if (!detail.empty()) line += ", " + detail;
  if (total > 0 && rate > 0 && done <= total) {
    line += ", ETA " + format_duration(static_cast<double>(total - done) / rate);
  }
  line += ", elapsed " + format_duration(elapsed_s);
  return line;
}

void Progress::update(uint64_t done, const std::string& detail) {
  done_ = done;
  const double now = clock_.elapsed_s();
  const double period = terminal_ ? options_.redraw_every_s : options_.log_every_s;
  if (now - last_print_s_ < period) return;
  last_print_s_ = now;
  print(false, detail);
}

void Progress::finish(const std::string& detail) {
  if (finished_) return;
  finished_ = true;
  if (terminal_ || drew_ || !detail.empty()) print(true, detail);
}

void Progress::print(bool final_line, const std::string& detail) {
  if (!log::enabled(log::Level::kInfo)) return;
  const std::string line =
      format_line(what_, done_, total_, clock_.elapsed_s(), options_.unit, detail);
  drew_ = true;
  if (terminal_) {
    std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final_line ? "\n" : "");
    std::fflush(stderr);
  } else {
    MS_LOG(Info) << line;
  }
}

}  // namespace ms::data
