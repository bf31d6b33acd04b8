// Overflow-checked arithmetic for sizes read from files: tensor shapes, element counts, byte
// counts, offsets and offset + length. A checkpoint manifest, a safetensors header or a
// config.json is input a user (or an attacker) controls; multiplying its numbers in plain
// int64_t wraps silently (a shape of [3, 6148914691236517206] "has" 2 elements), and every
// allocation, bounds check and copy computed from a wrapped number is wrong. Every reader of
// such numbers goes through these functions, so there is one definition of "a valid shape".
//
// The limits: each dimension in [0, 2^62] (no real tensor comes near it, and an offset plus a
// length each below the limit cannot overflow int64_t), element and byte counts that fit
// int64_t. Errors are
// InvalidArgument with `what` (the caller's name for the number: "tensor 'x' shape") first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms {

inline constexpr int64_t kMaxDimension = int64_t{1} << 62;

namespace checked_detail {

inline std::string shape_text(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace checked_detail

// a + b for non-negative numbers; InvalidArgument when either is negative or the sum overflows.
inline Result<int64_t> checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t sum = 0;
  if (a < 0 || b < 0 || __builtin_add_overflow(a, b, &sum)) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(a) + " + " +
                           std::to_string(b) + " is negative or overflows 64 bits");
  }
  return sum;
}

// offset + length of a byte range; InvalidArgument when the end overflows 64 bits.
inline Result<uint64_t> checked_end(uint64_t offset, uint64_t length, std::string_view what) {
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, length, &end)) {
    return InvalidArgument(std::string(what) + ": offset " + std::to_string(offset) +
                           " + length " + std::to_string(length) + " overflows 64 bits");
  }
  return end;
}

// a * b for non-negative numbers; InvalidArgument when the product does not fit int64_t.
inline Result<int64_t> checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t product = 0;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &product)) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(a) + " * " +
                           std::to_string(b) + " is negative or overflows 64 bits");
  }
  return product;
}

// The element count of `shape` (1 for a scalar). Refuses a negative dimension, one above
// kMaxDimension, and a product that overflows, naming `what`, the shape and the dimension.
inline Result<int64_t> checked_numel(std::span<const int64_t> shape, std::string_view what) {
  int64_t n = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    const std::string here = std::string(what) + " " + checked_detail::shape_text(shape);
    if (shape[d] < 0) {
      return InvalidArgument(here + ": dimension " + std::to_string(d) + " is negative");
    }
    if (shape[d] > kMaxDimension) {
      return InvalidArgument(here + ": dimension " + std::to_string(d) + " is " +
                             std::to_string(shape[d]) + ", above the limit 2^62");
    }
    if (__builtin_mul_overflow(n, shape[d], &n)) {
      return InvalidArgument(here + ": the element count overflows 64 bits");
    }
  }
  return n;
}

// checked_numel(shape) * element_size, the bytes of a row-major tensor; the count must fit
// int64_t, so it also fits size_t and a file offset.
inline Result<uint64_t> checked_nbytes(std::span<const int64_t> shape, size_t element_size,
                                       std::string_view what) {
  MS_ASSIGN_OR_RETURN(const int64_t n, checked_numel(shape, what));
  int64_t bytes = 0;
  if (element_size > static_cast<size_t>(std::numeric_limits<int64_t>::max()) ||
      __builtin_mul_overflow(n, static_cast<int64_t>(element_size), &bytes)) {
    return InvalidArgument(std::string(what) + " " + checked_detail::shape_text(shape) +
                           ": the byte count overflows 64 bits");
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace ms
