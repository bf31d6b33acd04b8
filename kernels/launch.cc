// Argument checks and grid sizing for kernels/ entry points; plain C++ so it is compiled once by
// the host compiler and unit-tested without a GPU.
#include "kernels/launch.h"

#include <algorithm>
#include <cstdint>
#include <string>

namespace ms::kernels {
namespace {

uintptr_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool ranges_overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  if (a_bytes == 0 || b_bytes == 0) return false;
  return address(a) < address(b) + b_bytes && address(b) < address(a) + a_bytes;
}

std::string prefix(std::string_view op, std::string_view name) {
  return std::string(op) + ": " + std::string(name);
}

}  // namespace

Status check_buffer(std::string_view op, std::string_view name, const void* ptr, size_t count,
                    size_t alignment) {
  if (ptr == nullptr && count > 0) {
    return InvalidArgument(prefix(op, name) + " is null but " + std::to_string(count) +
                           " elements were requested");
  }
  if (address(ptr) % alignment != 0) {
    return InvalidArgument(prefix(op, name) + " is not aligned to its element size (" +
                           std::to_string(alignment) + " bytes)");
  }
  return Status::OK();
}

Status check_same_or_disjoint(std::string_view op, std::string_view a_name, const void* a,
                              std::string_view b_name, const void* b, size_t bytes) {
  if (a == b || !ranges_overlap(a, bytes, b, bytes)) return Status::OK();
  return InvalidArgument(prefix(op, a_name) + " and " + std::string(b_name) +
                         " partially overlap; pass the same buffer for in-place use or disjoint "
                         "buffers");
}

Status check_disjoint(std::string_view op, std::string_view a_name, const void* a, size_t a_bytes,
                      std::string_view b_name, const void* b, size_t b_bytes) {
  if (!ranges_overlap(a, a_bytes, b, b_bytes)) return Status::OK();
  return InvalidArgument(prefix(op, a_name) + " and " + std::string(b_name) +
                         " overlap; they must be disjoint buffers");
}

Status check_not_negative(std::string_view op, std::string_view name, int64_t value) {
  if (value >= 0) return Status::OK();
  return InvalidArgument(std::string(op) + ": " + std::string(name) + " is negative (" +
                         std::to_string(value) + ")");
}

Status check_at_least(std::string_view op, std::string_view name, int64_t value,
                      int64_t minimum) {
  if (value >= minimum) return Status::OK();
  return InvalidArgument(std::string(op) + ": " + std::string(name) + " is " +
                         std::to_string(value) + "; it must be at least " +
                         std::to_string(minimum));
}

unsigned blocks_for(size_t n, unsigned max_blocks) {
  const size_t needed = (n + kBlockThreads - 1) / kBlockThreads;
  return static_cast<unsigned>(std::clamp<size_t>(needed, 1, max_blocks));
}

}  // namespace ms::kernels
