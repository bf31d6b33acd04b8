#include "core/version.h"

#include "ms_build_info.h"

namespace ms {

std::string_view version() { return MS_VERSION_STRING; }

std::string_view git_revision() { return MS_GIT_REVISION; }

std::string version_string() {
  return std::string(version()) + " (git " + std::string(git_revision()) + ")";
}

}  // namespace ms
