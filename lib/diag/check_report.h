// Presentation of a check run: the per-rank table, nccl-tests-style collective tables, the
// point-to-point matrix with its slow links, and the verdict per machine, as text for people
// and as JSON (--json) for programs.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "diag/check.h"
#include "diag/health.h"
#include "diag/nodes.h"

namespace ms::diag {

// A collective whose peak bus bandwidth (peak_busbw_gbs) is below CheckOptions::min_busbw_gbs.
struct SlowCollective {
  Collective collective = Collective::kAllReduce;
  double peak_busbw_gbs = 0;
  bool nccl = false;  // judged on the NCCL sweep
};

struct CheckVerdict {
  HealthReport health;
  std::vector<SlowLink> slow_links;
  uint64_t wrong = 0;  // wrong elements over every collective and size
  double min_busbw_gbs = 0;                    // the threshold judged (0: none)
  std::vector<SlowCollective> below_min_busbw;
  // The machines of the suspects, each once, in rank order (nodes.h): for sbatch --exclude.
  std::vector<std::string> suspect_nodes;
  // Healthy: no suspect machine, every collective result exact and fast enough.
  bool healthy() const {
    return !health.any_suspect() && wrong == 0 && below_min_busbw.empty();
  }
};

// A single rank moves no data between ranks (sendrecv goes to itself), so nothing is held to
// check_options.min_busbw_gbs there. When the NCCL sweep ran (check --nccl), it is the one held
// to min_busbw_gbs (a GPU link's floor means nothing to host-memory MPI); wrong elements of
// both sweeps count.
CheckVerdict judge_check(const CheckResults& results, const CheckOptions& check_options,
                         const HealthOptions& options);

std::string format_check_report(const CheckResults& results, const CheckOptions& options,
                                const CheckVerdict& verdict);
nlohmann::ordered_json check_report_json(const CheckResults& results, const CheckOptions& options,
                                         const HealthOptions& health_options,
                                         const CheckVerdict& verdict);

}  // namespace ms::diag
