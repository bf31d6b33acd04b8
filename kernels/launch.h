// Helpers shared by the entry points of kernels/ (host code only): argument checks that turn a
// bad pointer or size into InvalidArgument before anything reaches the GPU, and grid sizing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/status.h"

namespace ms::kernels {

// Threads per block for every kernel in kernels/ (a multiple of the 32-thread warp).
inline constexpr unsigned kBlockThreads = 256;
// Most blocks an elementwise launch uses; larger inputs are covered by grid-stride loops.
inline constexpr unsigned kMaxElementwiseBlocks = 4096;

// InvalidArgument "<op>: <name> ..." when `ptr` is null while `count` > 0, or not aligned to
// `alignment` bytes. `op` and `name` appear in the message ("kernels::add: out is null ...").
Status check_buffer(std::string_view op, std::string_view name, const void* ptr, size_t count,
                    size_t alignment);

template <typename T>
Status check_buffer(std::string_view op, std::string_view name, const T* ptr, size_t count) {
  return check_buffer(op, name, static_cast<const void*>(ptr), count, alignof(T));
}

// InvalidArgument when the byte ranges [a, a + bytes) and [b, b + bytes) overlap but do not
// coincide. Elementwise ops allow out == in (in place); a shifted overlap would race.
Status check_same_or_disjoint(std::string_view op, std::string_view a_name, const void* a,
                              std::string_view b_name, const void* b, size_t bytes);

// InvalidArgument when [a, a + a_bytes) and [b, b + b_bytes) overlap at all.
Status check_disjoint(std::string_view op, std::string_view a_name, const void* a, size_t a_bytes,
                      std::string_view b_name, const void* b, size_t b_bytes);

// InvalidArgument "<op>: <name> is negative (<value>)" for a size below 0.
Status check_not_negative(std::string_view op, std::string_view name, int64_t value);

// InvalidArgument "<op>: <name> is <value>; it must be at least <minimum>" when value < minimum.
Status check_at_least(std::string_view op, std::string_view name, int64_t value,
                      int64_t minimum);

// Elements in an (a, b) array, as the size_t check_buffer takes (both already checked >= 0).
inline size_t elements(int64_t a, int64_t b = 1) {
  return static_cast<size_t>(a) * static_cast<size_t>(b);
}

// Blocks of kBlockThreads covering n elements, at least 1 and at most max_blocks.
unsigned blocks_for(size_t n, unsigned max_blocks);

}  // namespace ms::kernels
