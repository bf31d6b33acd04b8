// Buffer: an owning, aligned block of bytes, the storage under every Tensor. Aligned to 64 bytes
// by default (a cache line, and enough for AVX-512 loads) because kernels and O_DIRECT-style I/O
// want aligned storage; move-only so ownership of large allocations is always explicit.
// Buffers of 2 MiB and more are mapped on their own, 2 MiB aligned and advised for transparent
// huge pages (core/huge_pages.h): parameters, optimizer states, checkpoint staging and load
// destinations are streamed end to end, and filling fresh memory (a checkpoint load) faults
// once per 2 MiB instead of once per 4 KiB.
#pragma once

#include <cstddef>
#include <span>

#include "core/status.h"

namespace ms {

class Buffer {
 public:
  static constexpr size_t kDefaultAlignment = 64;

  // An empty buffer: size 0, data() == nullptr.
  Buffer() = default;
  // Allocates `bytes` uninitialized bytes aligned to `alignment` (a power of two, at least
  // sizeof(void*); asserted). Throws std::bad_alloc when memory runs out, like std::vector; use
  // allocate() where running out of memory is an error to report.
  explicit Buffer(size_t bytes, size_t alignment = kDefaultAlignment);
  // As the constructor, but an exhausted allocator becomes an error Status naming the size.
  static Result<Buffer> allocate(size_t bytes, size_t alignment = kDefaultAlignment);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  size_t size() const { return size_; }
  size_t alignment() const { return alignment_; }
  bool empty() const { return size_ == 0; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  std::span<std::byte> bytes() { return {static_cast<std::byte*>(data_), size_}; }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  Buffer(void* data, size_t size, size_t alignment) : data_(data), size_(size), alignment_(alignment) {}

  void* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = kDefaultAlignment;
};

}  // namespace ms
