// Command-line lists of key=value items (config/key_values.h).
#include "config/key_values.h"

#include <algorithm>
#include <set>
#include <string>

namespace ms::config {

Status parse_key_values(std::string_view text, std::string_view flag, std::string_view example,
                        const std::function<Status(std::string_view key,
                                                   std::string_view value)>& apply) {
  std::set<std::string_view> seen;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument(std::string(flag) + ": expected key=value items like " +
                             std::string(example) + ", got '" + std::string(item) + "'");
    }
    if (!seen.insert(item.substr(0, eq)).second) {
      return InvalidArgument(std::string(flag) + ": key '" + std::string(item.substr(0, eq)) +
                             "' is given twice in '" + std::string(text) + "'");
    }
    MS_RETURN_IF_ERROR(apply(item.substr(0, eq), item.substr(eq + 1)));
    start = comma + 1;
  }
  return Status::OK();
}

}  // namespace ms::config
