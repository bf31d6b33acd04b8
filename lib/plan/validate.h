// `ms-train plan --validate N`: the top candidates trained for N steps on the actual ranks, so a
// user can confirm the pick before a long job. The training itself is ms-train's (the command
// launches it); this is what is pure about it: which candidates, the measured step from a run's
// step times, and the verdict.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "plan/search.h"

namespace ms::plan {

// The layouts to train: the recommendation first, then the ranked list in predicted order,
// `count` in all, skipping any that differ from one already taken only in what barely moves a
// step (ZeRO-1 on or off, recomputation, sequence parallelism): several candidates of one shape
// would tell a user nothing the first did not.
std::vector<size_t> validation_candidates(const SearchResult& result, size_t count);

// A run's step time: the median of its steps' step_s (pairs of step number and seconds) after
// the first, which pays for warm-up (page faults, BLAS buffers, MPI connections); all of them
// when there is only one. InvalidArgument when there are none.
Result<double> measured_step_seconds(std::vector<std::pair<int64_t, double>> steps);

struct ValidatedLayout {
  Prediction prediction;
  double measured_s = 0;
};

// `runs[0]` is the recommendation. The text: each layout with predicted and measured step and
// its measured rank, then which was fastest and how far the recommendation was from it.
std::string validation_text(const std::vector<ValidatedLayout>& runs, int64_t steps);
nlohmann::ordered_json validation_json(const std::vector<ValidatedLayout>& runs, int64_t steps);

}  // namespace ms::plan
