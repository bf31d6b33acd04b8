// Machine names for batch systems; see nodes.h.
#include "diag/nodes.h"

#include <algorithm>
#include <cstdlib>

namespace ms::diag {

std::string machine_name(const char* slurm_node_name, const std::string& host) {
  if (slurm_node_name != nullptr && slurm_node_name[0] != '\0') return slurm_node_name;
  return host;
}

std::string machine_name_from_env(const std::string& host) {
  return machine_name(std::getenv("SLURMD_NODENAME"), host);
}

std::vector<std::string> suspect_nodes(const HealthReport& report,
                                       const std::vector<RankMeasurement>& ranks) {
  std::vector<int> suspect_ranks;
  for (const MachineVerdict& m : report.machines) {
    if (m.suspect) suspect_ranks.insert(suspect_ranks.end(), m.ranks.begin(), m.ranks.end());
  }
  std::sort(suspect_ranks.begin(), suspect_ranks.end());
  std::vector<std::string> nodes;
  for (int r : suspect_ranks) {
    if (r < 0 || static_cast<size_t>(r) >= ranks.size()) continue;
    const std::string& host = ranks[static_cast<size_t>(r)].host;
    if (std::find(nodes.begin(), nodes.end(), host) == nodes.end()) nodes.push_back(host);
  }
  return nodes;
}

std::string node_list(const std::vector<std::string>& nodes) {
  std::string out;
  for (const std::string& n : nodes) out += (out.empty() ? "" : ",") + n;
  return out;
}

}  // namespace ms::diag
