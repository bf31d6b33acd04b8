// The overlap statistic's arithmetic; see comm_stats.h.
#include "parallel/comm_stats.h"

#include <algorithm>

namespace ms::parallel {

double CommStats::hidden_fraction() const {
  if (active_s <= 0) return 0;
  return std::clamp(1.0 - exposed_s / active_s, 0.0, 1.0);
}

void CommStats::add(const CommStats& other) {
  collectives += other.collectives;
  bytes += other.bytes;
  active_s += other.active_s;
  exposed_s += other.exposed_s;
}

}  // namespace ms::parallel
