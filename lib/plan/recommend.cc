// The recommendation among ties; see recommend.h.
#include "plan/recommend.h"

#include <cstdio>

namespace ms::plan {
namespace {

std::string format(const char* fmt, double a) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), fmt, a);
  return buf;
}

// Peer waits this much apart or less count as the same (the busbw model's own precision is
// far coarser).
constexpr double kSameWait = 0.01;

}  // namespace

bool ties_with(const Prediction& p, const Prediction& fastest) {
  return p.step_s - p.band_s <= fastest.step_s + fastest.band_s;
}

Recommendation recommend(const std::vector<Prediction>& ranked) {
  Recommendation r;
  const Prediction& fastest = ranked.front();
  r.ties = 1;
  while (r.ties < ranked.size() && ties_with(ranked[r.ties], fastest)) ++r.ties;
  const std::string band =
      fastest.step_s > 0 ? format("%.1f%%", fastest.band_s / fastest.step_s * 100) : "0%";
  if (r.ties == 1) {
    r.reason = "the fastest predicted; no other layout is within its error band (+-" + band +
               " of the step, the profile's spread)";
    return r;
  }
  for (size_t i = 1; i < r.ties; ++i) {
    const double best = ranked[r.index].peer_wait_s();
    if (ranked[i].peer_wait_s() < best * (1 - kSameWait)) r.index = i;
  }
  const std::string count = std::to_string(r.ties) +
                            " layouts predicted within the error band (+-" + band +
                            " of the step, the profile's spread) of the fastest";
  if (r.index == 0) {
    r.reason = count + "; the fastest predicted also has the least modelled communication and pipeline wait (" +
               format("%.4g", fastest.peer_wait_s()) + " s per step)";
  } else {
    r.reason = count + "; this one has the least modelled communication and pipeline wait (" +
               format("%.4g", ranked[r.index].peer_wait_s()) + " s per step against " +
               format("%.4g", fastest.peer_wait_s()) + " s for the fastest predicted, " +
               format("%.4g", fastest.step_s) + " s)";
  }
  return r;
}

}  // namespace ms::plan
