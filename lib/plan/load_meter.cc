// Other processes' share of the node's CPU; see load_meter.h.
#include "plan/load_meter.h"

#include <algorithm>
#include <utility>

namespace ms::plan {
namespace {

// Others' busy ticks and the node's total ticks between two readings.
std::pair<double, double> others_and_total(const LoadReading& before, const LoadReading& after) {
  if (after.node.total <= before.node.total || after.node.busy < before.node.busy) return {0, 0};
  const double busy = static_cast<double>(after.node.busy - before.node.busy);
  const double total = static_cast<double>(after.node.total - before.node.total);
  const double own = std::max(0.0, after.own_ticks - before.own_ticks);
  return {std::clamp(busy - own, 0.0, total), total};
}

}  // namespace

Result<LoadReading> read_load(const std::string& proc_root) {
  LoadReading r;
  MS_ASSIGN_OR_RETURN(const std::string stat, read_text_file(proc_root + "/stat"));
  MS_ASSIGN_OR_RETURN(r.node, parse_proc_stat(stat, proc_root + "/stat"));
  MS_ASSIGN_OR_RETURN(const std::string self, read_text_file(proc_root + "/self/stat"));
  // Ticks, the unit of /proc/stat: parse with one tick per "second".
  MS_ASSIGN_OR_RETURN(r.own_ticks, parse_process_cpu_seconds(self, 1.0, proc_root + "/self/stat"));
  return r;
}

double others_share(const LoadReading& before, const LoadReading& after) {
  const auto [others, total] = others_and_total(before, after);
  return total > 0 ? others / total : 0;
}

void LoadTally::add(const LoadReading& before, const LoadReading& after) {
  const auto [others, total] = others_and_total(before, after);
  others_ += others;
  total_ += total;
}

}  // namespace ms::plan
