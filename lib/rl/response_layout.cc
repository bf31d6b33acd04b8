#include "rl/response_layout.h"

#include <string>

namespace ms::rl {

Result<ResponseLayout> ResponseLayout::from_lengths(std::span<const int64_t> lengths) {
  ResponseLayout layout;
  layout.offsets_.reserve(lengths.size() + 1);
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      return InvalidArgument("response " + std::to_string(i) + " has a negative length (" +
                             std::to_string(lengths[i]) + ")");
    }
    layout.offsets_.push_back(layout.offsets_.back() + lengths[i]);
  }
  return layout;
}

Status ResponseLayout::check_tokens(std::span<const double> values, const char* what) const {
  if (static_cast<int64_t>(values.size()) != num_tokens()) {
    return InvalidArgument(std::string(what) + " has " + std::to_string(values.size()) +
                           " entries for " + std::to_string(num_tokens()) + " response tokens");
  }
  return Status::OK();
}

Status ResponseLayout::check_responses(std::span<const double> values, const char* what) const {
  if (static_cast<int64_t>(values.size()) != num_responses()) {
    return InvalidArgument(std::string(what) + " has " + std::to_string(values.size()) +
                           " entries for " + std::to_string(num_responses()) + " responses");
  }
  return Status::OK();
}

}  // namespace ms::rl
