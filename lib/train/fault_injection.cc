#include "train/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/logging.h"

namespace ms::train {

Result<std::vector<int64_t>> parse_slots(const std::string& text) {
  std::vector<int64_t> slots;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    char* stop = nullptr;
    const long long value = std::strtoll(part.c_str(), &stop, 10);
    if (part.empty() || *stop != '\0' || value < 0) {
      return InvalidArgument(std::string(kSlotsEnv) + "=\"" + text + "\": entry " +
                             std::to_string(slots.size()) + " (\"" + part +
                             "\") is not a slot number");
    }
    slots.push_back(value);
    begin = end + 1;
  }
  return slots;
}

FaultInjector::FaultInjector(config::DebugConfig debug, int64_t slot, std::string run_dir)
    : debug_(std::move(debug)), slot_(slot), run_dir_(std::move(run_dir)) {}

Result<int64_t> FaultInjector::slot_of(int world_rank) {
  const char* text = std::getenv(kSlotsEnv);
  if (text == nullptr || *text == '\0') return world_rank;
  MS_ASSIGN_OR_RETURN(const std::vector<int64_t> slots, parse_slots(text));
  if (static_cast<size_t>(world_rank) >= slots.size()) {
    return InvalidArgument(std::string(kSlotsEnv) + " lists " + std::to_string(slots.size()) +
                           " slots but this is world rank " + std::to_string(world_rank));
  }
  return slots[static_cast<size_t>(world_rank)];
}

void FaultInjector::at_step_start(int64_t step) const {
  if (debug_.kill_rank == slot_ && debug_.kill_step == step) {
    MS_LOG(Warn) << "debug.kill_rank: slot " << slot_ << " kills itself at step " << step;
    std::raise(SIGKILL);
  }
  if (debug_.hang_rank == slot_ && debug_.hang_step == step) {
    MS_LOG(Warn) << "debug.hang_rank: slot " << slot_ << " hangs at step " << step;
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

double FaultInjector::slow_ms(int64_t step) const {
  return debug_.slow_rank == slot_ && step >= debug_.slow_from_step ? debug_.slow_ms : 0.0;
}

bool FaultInjector::poison_loss(int64_t step) const {
  if (debug_.nan_rank != slot_ || debug_.nan_step != step) return false;
  if (debug_.nan_repeat) return true;
  // Transient: the marker says it already fired in an earlier run on this directory.
  const std::filesystem::path dir = std::filesystem::path(run_dir_) / "debug";
  const std::filesystem::path marker = dir / ("nan-step-" + std::to_string(step));
  std::error_code ec;
  if (std::filesystem::exists(marker, ec)) return false;
  std::filesystem::create_directories(dir, ec);
  std::ofstream(marker) << "slot " << slot_ << "\n";
  return true;
}

}  // namespace ms::train
