// Machines as a batch system names them. Under Slurm a node's name (slurm.conf's NodeName, which
// the task environment carries as SLURMD_NODENAME) may differ from its host name, and it is
// the node name that `sbatch --exclude`, `scontrol update nodename=` and `scontrol show node`
// take; so `ms-diagnose check` names machines by it there, and by the MPI processor name
// elsewhere.
#pragma once

#include <string>
#include <vector>

#include "diag/health.h"

namespace ms::diag {

// The name this rank's machine goes by: `slurm_node_name` (the value of SLURMD_NODENAME, or
// nullptr where it is unset) when it is not empty, else `host`.
std::string machine_name(const char* slurm_node_name, const std::string& host);
// machine_name() with this process's SLURMD_NODENAME.
std::string machine_name_from_env(const std::string& host);

// The distinct machines (each rank's host field) holding a rank of a suspect machine, in rank
// order. With grouping by rank, a suspect rank names its machine.
std::vector<std::string> suspect_nodes(const HealthReport& report,
                                       const std::vector<RankMeasurement>& ranks);
// "node03,node07": the form `sbatch --exclude=` and `scontrol` take; empty when none.
std::string node_list(const std::vector<std::string>& nodes);

}  // namespace ms::diag
