// Progress of long work (dataset builds, tokenizer training, planning): a line with done/total,
// rate and ETA, redrawn in place with '\r' when stderr is a terminal, and as an info log line
// every `log_every_s` seconds otherwise, so batch logs stay readable. Only the rank that logs
// info (rank 0 by default) prints. Not thread-safe: one thread reports.
#pragma once

#include <cstdint>
#include <string>

#include "core/timer.h"

namespace ms::data {

struct ProgressOptions {
  std::string unit = "B";       // "B" formats as KB/MB/GB; any other unit prints plain counts
  double redraw_every_s = 0.2;  // terminal redraw period
  double log_every_s = 10.0;    // log line period when not a terminal
  // Force terminal or log style (tests); by default isatty(stderr) decides.
  enum class Style { kAuto, kTerminal, kLog } style = Style::kAuto;
};

class Progress {
 public:
  // `what` names the work ("build data/books"); `total` is 0 when unknown (no percent or ETA).
  Progress(std::string what, uint64_t total, ProgressOptions options = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Reports `done` units so far and a free-form detail ("1.2M tokens"); prints when due.
  void update(uint64_t done, const std::string& detail = "");
  // Prints the final line (ending the terminal line with a newline). Called by the destructor
  // when not called before.
  void finish(const std::string& detail = "");

  // The text of a progress line, without '\r'; exposed for tests.
  static std::string format_line(const std::string& what, uint64_t done, uint64_t total,
                                 double elapsed_s, const std::string& unit,
                                 const std::string& detail);

 private:
  void print(bool final_line, const std::string& detail);

  std::string what_;
  uint64_t total_;
  ProgressOptions options_;
  bool terminal_;
  Stopwatch clock_;
  double last_print_s_ = 0.0;
  uint64_t done_ = 0;
  bool finished_ = false;
  bool drew_ = false;
};

}  // namespace ms::data
