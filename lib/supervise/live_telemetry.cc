#include "supervise/live_telemetry.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"

namespace ms::supervise {
namespace {

template <typename T>
void drop_before(std::vector<T>& records, double t) {
  records.erase(std::remove_if(records.begin(), records.end(),
                               [t](const T& r) { return r.t < t; }),
                records.end());
}

}  // namespace

Result<std::vector<telemetry::StepRecordRead>> LiveTelemetry::poll() {
  std::vector<telemetry::StepRecordRead> steps;
  skipped_.clear();
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) return steps;
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) == 0 && entry.path().extension() == ".jsonl") {
      paths.push_back(entry.path().string());
    }
  }
  std::sort(paths.begin(), paths.end());
  for (const std::string& path : paths) {
    File& file = files_[path];
    file.records.path = path;
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) continue;  // gone between the listing and now
    if (size < file.offset) {  // replaced: start over
      file = File();
      file.records.path = path;
    }
    if (size == file.offset) continue;
    // At most one text file's cap a poll: a file that claims terabytes (sparse, or not the
    // job's) must not size the read; the rest comes at the next poll.
    const uint64_t want = std::min(size - file.offset, io::kMaxTextFileBytes);
    std::ifstream in(path, std::ios::binary);
    in.seekg(static_cast<std::streamoff>(file.offset));
    std::string text(want, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
    const size_t complete = text.rfind('\n');
    if (complete == std::string::npos && want == io::kMaxTextFileBytes) {
      return InvalidArgument("telemetry file '" + path + "' has a line longer than " +
                             std::to_string(io::kMaxTextFileBytes) + " bytes at byte " +
                             std::to_string(file.offset) + "; not the job's telemetry?");
    }
    if (complete == std::string::npos) continue;  // a line still being written
    text.resize(complete + 1);
    const size_t before = file.records.steps.size();
    // Line by line, so that a bad one is passed over rather than read again at every poll.
    for (size_t start = 0; start < text.size(); ++file.next_line) {
      const size_t end = text.find('\n', start) + 1;
      const Status parsed = telemetry::append_telemetry_lines(
          std::string_view(text).substr(start, end - start), file.next_line, file.records);
      if (!parsed.ok()) skipped_.push_back(parsed.message());
      start = end;
    }
    file.offset += text.size();
    steps.insert(steps.end(), file.records.steps.begin() + static_cast<std::ptrdiff_t>(before),
                 file.records.steps.end());
  }
  return steps;
}

std::vector<telemetry::RankTelemetry> LiveTelemetry::since(double t) const {
  std::vector<telemetry::RankTelemetry> out;
  for (const auto& [path, file] : files_) {
    telemetry::RankTelemetry r = file.records;
    drop_before(r.hosts, t);
    drop_before(r.steps, t);
    if (!r.hosts.empty() || !r.steps.empty()) out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  return out;
}

void LiveTelemetry::forget_before(double t) {
  for (auto& [path, file] : files_) {
    drop_before(file.records.hosts, t);
    drop_before(file.records.steps, t);
  }
}

}  // namespace ms::supervise
