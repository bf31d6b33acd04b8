// Which layers each pipeline stage holds (issue 13, item 1), pure: the model's n_layers cut
// into S = pp * vpp virtual stages, evenly by default or by an explicit list
// (`parallel.pp_layers: [n0, n1, ...]`). A cut that does not account for every layer is
// refused, with cuts that would work, never rounded: other trainers have shipped silently
// dropped layers. The embedding belongs to virtual stage 0; the final norm, output layer and
// loss to stage S - 1.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace ms::parallel {

// Layers [first, first + count) of the model.
struct StageLayers {
  int64_t first = 0;
  int64_t count = 0;
  bool operator==(const StageLayers&) const = default;
};

// The layers of every virtual stage, in stage order. `explicit_counts` empty: n_layers / S
// each, refused when S does not divide n_layers (the message lists the pp that divide it and
// an explicit parallel.pp_layers that would work). Otherwise it must have S entries, each at
// least 1, summing to n_layers (the message says which rule broke and by how much).
// InvalidArgument also for n_layers, pp or vpp below 1.
Result<std::vector<StageLayers>> pp_stage_layers(int64_t n_layers, int pp, int vpp,
                                                 const std::vector<int64_t>& explicit_counts);

}  // namespace ms::parallel
