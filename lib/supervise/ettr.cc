#include "supervise/ettr.h"

#include <algorithm>
#include <map>

namespace ms::supervise {

EttrReport compute_ettr(const std::vector<StepTiming>& steps,
                        const std::vector<IncidentTiming>& incidents, double t_begin, double t_end) {
  EttrReport report;
  report.wall_s = std::max(0.0, t_end - t_begin);
  std::map<int64_t, double> kept;  // step -> the duration of its last run
  for (const StepTiming& s : steps) kept[s.step] = s.step_s;
  for (const auto& [step, seconds] : kept) report.productive_s += seconds;
  report.steps = static_cast<int64_t>(kept.size());
  report.ettr = report.wall_s > 0 ? report.productive_s / report.wall_s : 0;
  for (const IncidentTiming& incident : incidents) {
    IncidentRecovery r;
    r.detect_s = std::max(0.0, incident.detected_t - incident.progress_t);
    bool first = true;
    for (const StepTiming& s : steps) {
      if (s.attempt <= incident.attempt) continue;
      if (first) {
        r.recover_s = s.t - incident.progress_t;
        r.resumed_from = s.step - 1;
        r.lost_steps = std::max<int64_t>(0, incident.last_step - r.resumed_from);
        first = false;
      }
      if (s.step > incident.last_step) {
        r.regain_s = s.t - incident.progress_t;
        break;
      }
    }
    report.incidents.push_back(r);
  }
  return report;
}

}  // namespace ms::supervise
