#include "supervise/event_log.h"

#include <cerrno>
#include <cstring>

#include "core/timer.h"

namespace ms::supervise {

Result<std::unique_ptr<EventLog>> EventLog::open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) return IOError("cannot open " + path + ": " + std::strerror(errno));
  return std::unique_ptr<EventLog>(new EventLog(path, file));
}

EventLog::~EventLog() { std::fclose(file_); }

Status EventLog::write(const std::string& name, nlohmann::ordered_json fields) {
  nlohmann::ordered_json event;
  event["t"] = wall_time_s();
  event["event"] = name;
  for (auto& [key, value] : fields.items()) event[key] = std::move(value);
  const std::string line = event.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return IOError("cannot write to " + path_ + ": " + std::strerror(errno));
  }
  return Status::OK();
}

}  // namespace ms::supervise
