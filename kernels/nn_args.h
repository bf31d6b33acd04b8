// Shape checks shared by the layer kernels' entry points (kernels/nn.cu and
// kernels/embedding_loss.cu): a size that is negative, or below what another argument
// requires, becomes InvalidArgument naming the op and the argument before anything reaches the
// GPU. Host code only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms::kernels {

// InvalidArgument "<op>: <name> is <value>; it must be at least <minimum>" when value < minimum.
inline Status check_at_least(std::string_view op, std::string_view name, int64_t value,
                             int64_t minimum) {
  if (value >= minimum) return Status::OK();
  return InvalidArgument(std::string(op) + ": " + std::string(name) + " is " +
                         std::to_string(value) + "; it must be at least " +
                         std::to_string(minimum));
}

// Elements in an (a, b) array, as the size_t check_buffer takes (both already checked >= 0).
inline size_t elements(int64_t a, int64_t b = 1) {
  return static_cast<size_t>(a) * static_cast<size_t>(b);
}

}  // namespace ms::kernels
