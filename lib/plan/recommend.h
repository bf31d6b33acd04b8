// Which of the ranked layouts `ms-train plan` recommends, and why. Predictions are uncertain by
// their error band (predict.h's band_s); a layout whose band overlaps the fastest one's is a
// tie, since the profile cannot tell them apart. Among ties the recommendation is the one with
// the least modelled communication and pipeline wait (Prediction::peer_wait_s): the model is
// least sure of what depends on peers (overlap, waits on a loaded machine), so the layout that
// needs the least of it is the safest of equals; the fastest predicted breaks a remaining tie.
#pragma once

#include <string>
#include <vector>

#include "plan/predict.h"

namespace ms::plan {

struct Recommendation {
  size_t index = 0;  // into the ranked list
  size_t ties = 1;   // layouts within the band of the fastest, the fastest included
  std::string reason;
};

// `ranked`: fastest first, not empty.
Recommendation recommend(const std::vector<Prediction>& ranked);

// True when `p`'s band overlaps `fastest`'s.
bool ties_with(const Prediction& p, const Prediction& fastest);

}  // namespace ms::plan
