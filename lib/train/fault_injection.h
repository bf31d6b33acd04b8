// Test-only fault injection for the trainer (the run config's debug.* keys, docs/supervise.md,
// "Fault injection"): a rank that is slow, dies, hangs or produces a NaN loss at a chosen step,
// so that `ms-diagnose supervise` and its tests meet the faults it must recover from. Faults
// name machine slots: the slot a rank runs in is its entry of MS_SUPERVISE_SLOTS (the
// supervisor's launch order, "0,1,3" after slot 2 was evicted), else its world rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "core/status.h"

namespace ms::train {

// The environment variable the supervisor passes the ranks' slots in.
inline constexpr const char* kSlotsEnv = "MS_SUPERVISE_SLOTS";

// Parses MS_SUPERVISE_SLOTS ("0,1,3": world rank r runs in slot list[r]). InvalidArgument naming
// the bad entry.
Result<std::vector<int64_t>> parse_slots(const std::string& text);

class FaultInjector {
 public:
  // `slot` is the rank's machine slot; `run_dir` holds the transient NaN's marker.
  FaultInjector(config::DebugConfig debug, int64_t slot, std::string run_dir);
  // The slot of `world_rank` under the environment's MS_SUPERVISE_SLOTS (the rank itself when
  // unset). InvalidArgument when the variable is malformed or too short for the rank.
  static Result<int64_t> slot_of(int world_rank);

  int64_t slot() const { return slot_; }
  // At the start of `step`: dies (SIGKILL) or stops forever when this slot's kill or hang is
  // due; returns otherwise.
  void at_step_start(int64_t step) const;
  // Milliseconds this slot sleeps before `step`'s first forward (0 when not slow).
  double slow_ms(int64_t step) const;
  // True when this slot's loss is to be NaN at `step`. A transient NaN (debug.nan_repeat
  // false) fires once per run directory: it leaves run_dir/debug/nan-step-<k> behind.
  bool poison_loss(int64_t step) const;

 private:
  config::DebugConfig debug_;
  int64_t slot_;
  std::string run_dir_;
};

}  // namespace ms::train
