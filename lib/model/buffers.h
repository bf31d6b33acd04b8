// Private to lib/model: the few buffer helpers every part of the forward and backward uses on
// the model's reusable activation and scratch vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ms::model {

// Resizes v to n elements and returns its data (contents unspecified).
inline float* sized(std::vector<float>& v, int64_t n) {
  v.resize(static_cast<size_t>(n));
  return v.data();
}

// Resizes v to n elements, all zero.
inline float* zeroed(std::vector<float>& v, int64_t n) {
  v.assign(static_cast<size_t>(n), 0.0f);
  return v.data();
}

}  // namespace ms::model
