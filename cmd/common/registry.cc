#include "cmd/common/registry.h"

#include <map>
#include <string>

namespace ms::cli {
namespace {

// Function-local so registration from other translation units' static initializers is safe
// whatever their order.
std::map<std::string, CommandSetup>& registry() {
  static std::map<std::string, CommandSetup> commands;
  return commands;
}

}  // namespace

CommandRegistration::CommandRegistration(const char* name, CommandSetup setup) {
  registry().emplace(name, setup);
}

void add_registered_commands(Tool& tool) {
  for (const auto& [name, setup] : registry()) setup(tool);
}

}  // namespace ms::cli
