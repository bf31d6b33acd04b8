#pragma once

#include "cmd/common/tool.h"

namespace ms::diagnose_cmd {

// `ms-diagnose info`: which ranks, hosts, devices and I/O backends a job got, and how far each
// rank's clock is from rank 0's. Run under mpirun to see the whole job; rank 0 prints.
void add_info_command(cli::Tool& tool, int& argc, char**& argv);

}  // namespace ms::diagnose_cmd
