// `ms-train plan --validate N`: trains each candidate layout for N steps with this ms-train
// binary under a launcher on the planned ranks, each in a run directory of its own, and reads
// its measured step back from the run's telemetry (lib/plan/validate.h for the pure side).
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "plan/search.h"
#include "plan/validate.h"

namespace ms::cli {

struct ValidateOptions {
  int64_t steps = 0;
  size_t candidates = 3;
  // The launcher command; "{ranks}" becomes the rank count, and the trainer's argv follows.
  std::string launcher = "mpirun -np {ranks}";
  std::string dir;  // a fresh directory is made under it for the runs
  std::string config_path;
  std::vector<std::string> sets;  // the plan's own --set values, before the layout's
  int world = 0;
};

// The candidates of `result` (plan::validation_candidates) trained one after another; the
// recommendation first. An error names the layout, its log and the end of its output.
Result<std::vector<plan::ValidatedLayout>> validate_layouts(const ValidateOptions& options,
                                                            const plan::SearchResult& result);

}  // namespace ms::cli
