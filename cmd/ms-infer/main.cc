// ms-infer: batch generation and disaggregated MoE serving (MegaScale-Infer). Subcommands join
// as they are built; each lives in its own file beside this one.
#include "cmd/common/registry.h"

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-infer",
                     "ms-infer: batch generation and MoE serving with attention and experts on "
                     "separate ranks");
  ms::cli::add_registered_commands(tool);
  return tool.run(argc, argv);
}
