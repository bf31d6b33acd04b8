// ms-diagnose: find faulty and slow machines from a shell (Minder, what-if straggler analysis,
// ByteRobust). Each subcommand lives in its own file beside this one.
#include "cmd/common/registry.h"

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-diagnose",
                     "ms-diagnose: health checks, fault detection from telemetry and straggler "
                     "analysis for training jobs");
  ms::cli::add_registered_commands(tool);
  return tool.run(argc, argv);
}
