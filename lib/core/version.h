// The toolkit's version and the git revision it was built from, baked in at build time (see
// cmake/WriteBuildInfo.cmake). Every artifact writer records version_string(), and every binary
// prints it for --version.
#pragma once

#include <string>
#include <string_view>

namespace ms {

// "0.1.0"
std::string_view version();
// `git describe --always --dirty --abbrev=12` of the source tree, e.g. "7764fb318669" or
// "7764fb318669-dirty"; "unknown" when built outside a git checkout.
std::string_view git_revision();
// "0.1.0 (git 7764fb318669)"
std::string version_string();

}  // namespace ms
