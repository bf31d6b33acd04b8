// ms-diagnose: find faulty and slow machines from a shell (Minder, what-if straggler analysis,
// ByteRobust). Each subcommand lives in its own file beside this one.
#include "cmd/common/tool.h"
#include "cmd/ms-diagnose/info.h"

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-diagnose",
                     "ms-diagnose: health checks, fault detection from telemetry and straggler "
                     "analysis for training jobs");
  ms::diagnose_cmd::add_info_command(tool, argc, argv);
  return tool.run(argc, argv);
}
