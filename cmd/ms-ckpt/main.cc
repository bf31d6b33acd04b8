// ms-ckpt: inspect, verify, reshard and convert checkpoints (ByteCheckpoint). Subcommands join
// as they are built; each lives in its own file beside this one.
#include "cmd/common/registry.h"

int main(int argc, char** argv) {
  ms::cli::Tool tool("ms-ckpt",
                     "ms-ckpt: save, load, inspect, verify, reshard, grow and convert "
                     "parallelism-agnostic checkpoints");
  ms::cli::add_registered_commands(tool);
  return tool.run(argc, argv);
}
