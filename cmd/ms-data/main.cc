// ms-data: tokenizers, token datasets and mixture plans (MegaScale-Data). Subcommands join as
// they are built; each lives in its own file beside this one.
#include "cmd/common/registry.h"

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-data",
                     "ms-data: tokenize corpora, build Megatron-compatible token datasets and "
                     "plan multi-source mixtures");
  ms::cli::add_registered_commands(tool);
  return tool.run(argc, argv);
}
