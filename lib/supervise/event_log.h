// The supervisor's event log (docs/formats/supervise-events.md): JSON lines appended to
// <state dir>/events.jsonl, one event a line, each flushed as it happens so a crash of the
// supervisor loses at most the line being written. Every event carries "t" (seconds since the
// epoch) and "event" (begin, start, fault, evict, hold, restart, stop, end).
#pragma once

#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ms::supervise {

class EventLog {
 public:
  // Opens `path` for appending (creating it). IOError naming the path.
  static Result<std::unique_ptr<EventLog>> open(const std::string& path);
  ~EventLog();
  // Writes {"t": now, "event": name, ...fields}; IOError when the write or flush fails.
  Status write(const std::string& name, nlohmann::ordered_json fields = nlohmann::ordered_json::object());
  const std::string& path() const { return path_; }

 private:
  EventLog(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

}  // namespace ms::supervise
