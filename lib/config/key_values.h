// Command-line lists of key=value items ("tp=2,dp=2,zero=1", "d_model=96,n_layers=6"): the one
// splitter behind every such flag, so they agree on the separators and on what is refused.
#pragma once

#include <functional>
#include <string_view>

#include "core/status.h"

namespace ms::config {

// Calls apply(key, value) for each comma-separated item of `text`, in order, and returns its
// first error. Refused, naming `flag`: an item without '=' ("<flag>: expected key=value items
// like <example>, got '<item>'") and a key given twice (taking the last would act on a value
// the user may not have meant).
Status parse_key_values(std::string_view text, std::string_view flag, std::string_view example,
                        const std::function<Status(std::string_view key,
                                                   std::string_view value)>& apply);

}  // namespace ms::config
