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

struct CheckVerdict {
  HealthReport health;
  std::vector<SlowLink> slow_links;
  uint64_t wrong = 0;  // wrong elements over every collective and size
  // The machines of the suspects, each once, in rank order (nodes.h): for sbatch --exclude.
  std::vector<std::string> suspect_nodes;
  // Healthy: no suspect machine and every collective result exact.
  bool healthy() const { return !health.any_suspect() && wrong == 0; }
};

CheckVerdict judge_check(const CheckResults& results, const HealthOptions& options);

std::string format_check_report(const CheckResults& results, const CheckOptions& options,
                                const CheckVerdict& verdict);
nlohmann::ordered_json check_report_json(const CheckResults& results, const CheckOptions& options,
                                         const HealthOptions& health_options,
                                         const CheckVerdict& verdict);

}  // namespace ms::diag
