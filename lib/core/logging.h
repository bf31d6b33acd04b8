// One logger for every tool. Lines look like
//   2026-11-30T04:23:14.123Z I node07 r3] message
// (time in UTC, level letter, host, rank). By default only rank 0 prints info and debug lines;
// warnings and errors print on every rank. Output goes to stderr and, optionally, a log file.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

// Parses "debug", "info", "warn"/"warning", "error", "off" (case-insensitive).
Result<Level> parse_level(std::string_view text);
std::string_view level_name(Level level);

void set_level(Level level);
Level level();
// Who this process is; the communicator sets this after MPI starts. Before that the host is the
// local hostname and the rank is 0.
void set_identity(std::string host, int rank);
int rank();
const std::string& host();
// When true, ranks other than 0 also print info and debug lines.
void set_all_ranks(bool all_ranks);
// Also append every printed line to `path` (the run's log.txt). Empty path closes the file.
Status set_log_file(const std::string& path);

bool enabled(Level level);
// Formats and writes one line; thread-safe.
void write(Level level, std::string_view message);

class LineBuilder {
 public:
  explicit LineBuilder(Level level) : level_(level) {}
  ~LineBuilder() { write(level_, stream_.str()); }
  std::ostringstream& stream() { return stream_; }

 private:
  Level level_;
  std::ostringstream stream_;
};

// Lets the MS_LOG macro be a single expression, so it is safe inside if/else without braces.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace ms::log

#define MS_LOG(severity)                                          \
  !::ms::log::enabled(::ms::log::Level::k##severity)              \
      ? (void)0                                                   \
      : ::ms::log::Voidify() & ::ms::log::LineBuilder(::ms::log::Level::k##severity).stream()
