// Self-registering subcommands, so each subcommand is one file that adds itself and no shared
// list has to be edited when one joins. Each binary links only its own command files, so the
// registry of a binary holds exactly its subcommands. Help lists them in name order.
//
//   // cmd/ms-data/verify.cc
//   static void add_verify(ms::cli::Tool& tool) { tool.add_subcommand("verify", ..., action); }
//   MS_CLI_COMMAND(verify, add_verify);
#pragma once

#include "cmd/common/tool.h"

namespace ms::cli {

using CommandSetup = void (*)(Tool& tool);

struct CommandRegistration {
  CommandRegistration(const char* name, CommandSetup setup);
};

// Calls every registered setup function, in name order.
void add_registered_commands(Tool& tool);

}  // namespace ms::cli

#define MS_CLI_COMMAND(name, setup) \
  static const ::ms::cli::CommandRegistration ms_cli_command_##name(#name, setup)
