// Effective training time ratio (ETTR, as MegaScale and ByteRobust report it): the time spent in
// the training steps the run keeps, over the wall time of the whole supervised run. A step that
// ran in an attempt that later failed, and was run again after the restart, counts once (its
// last run): the lost work, the time to notice a fault, to stop the job and to restart it all
// lower the ratio.
#pragma once

#include <cstdint>
#include <vector>

namespace ms::supervise {

// One completed step as rank 0's telemetry recorded it.
struct StepTiming {
  int attempt = 1;
  int64_t step = 0;
  double t = 0;       // when it was recorded (its end), seconds since the epoch
  double step_s = 0;  // its duration
};

// One fault, from the supervisor's side.
struct IncidentTiming {
  int attempt = 1;        // the attempt it ended
  // When it struck: the last step completed before it (the attempt's start if none), or when
  // detection first saw a slow or faulty machine stand out.
  double progress_t = 0;
  double detected_t = 0;  // when the supervisor classified it
  int64_t last_step = 0;  // the last step completed before it (0: none)
};

struct IncidentRecovery {
  double detect_s = 0;   // from progress_t to the verdict
  // From progress_t to the first step the next attempt completed; -1 when none did.
  double recover_s = -1;
  // From progress_t to the first step past `last_step`: the work lost is made up again.
  double regain_s = -1;
  int64_t resumed_from = 0;  // the step the next attempt resumed after (its first step - 1)
  int64_t lost_steps = 0;    // last_step - resumed_from
};

struct EttrReport {
  double wall_s = 0, productive_s = 0, ettr = 0;
  int64_t steps = 0;  // distinct steps completed
  std::vector<IncidentRecovery> incidents;
};

// `steps` in the order they were seen (attempt by attempt); [t_begin, t_end] the wall span.
EttrReport compute_ettr(const std::vector<StepTiming>& steps,
                        const std::vector<IncidentTiming>& incidents, double t_begin, double t_end);

}  // namespace ms::supervise
