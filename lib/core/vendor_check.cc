#include "core/vendor_check.h"

#include <array>
#include <string>

#include "core/logging.h"

namespace ms {

std::string_view project_relative_path(std::string_view path) {
  static constexpr std::array<std::string_view, 4> kRoots = {"lib/", "cmd/", "kernels/", "tests/"};
  for (std::string_view root : kRoots) {
    if (path.starts_with(root)) return path;
  }
  // The last "/<root>" wins, so a checkout that itself sits under a folder named lib/ still
  // shortens to the project's own lib/.
  size_t best = std::string_view::npos;
  for (std::string_view root : kRoots) {
    const std::string needle = "/" + std::string(root);
    const size_t pos = path.rfind(needle);
    if (pos != std::string_view::npos && (best == std::string_view::npos || pos > best)) best = pos;
  }
  return best == std::string_view::npos ? path : path.substr(best + 1);
}

Status vendor_error(std::string_view library, std::string_view call, std::string_view detail,
                    const char* file, int line, StatusCode code) {
  std::string m(library);
  m += " call '";
  m += call;
  m += "' failed at ";
  m += project_relative_path(file ? std::string_view(file) : std::string_view("?"));
  m += ':';
  m += std::to_string(line);
  m += " on host ";
  m += log::host();
  m += " rank ";
  m += std::to_string(log::rank());
  m += ": ";
  m += detail;
  if (code == StatusCode::kOk) code = StatusCode::kInternal;
  return Status(code, std::move(m));
}

}  // namespace ms
