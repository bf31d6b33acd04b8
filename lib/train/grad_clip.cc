// The clip coefficient; see grad_clip.h.
#include "train/grad_clip.h"

#include <algorithm>

namespace ms::train {

double clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0) return 1.0;
  return std::min(1.0, max_norm / (grad_norm + 1e-6));
}

}  // namespace ms::train
