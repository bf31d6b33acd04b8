// Buffer: an owning, aligned block of bytes, the storage under every Tensor. Aligned to 64 bytes
// by default (a cache line, and enough for AVX-512 loads) because kernels and O_DIRECT-style I/O
// want aligned storage; move-only so ownership of large allocations is always explicit.
// Pages::kHuge is for reused buffers that direct I/O reads into or writes from: the kernel pins
// a direct transfer's pages, 8 per 16 MiB instead of 4096.
// A buffer may also hold memory another allocator handed out (device memory from a CUDA arena,
// core/device_runtime.h): adopt() takes it with the device it lives on and the function that
// gives it back, so Tensor keeps one storage type for every device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/device.h"
#include "core/status.h"

namespace ms {

// The pages under a buffer: kHuge maps a buffer of 2 MiB or more on its own, 2 MiB aligned and
// advised for transparent huge pages (core/huge_pages.h). Not the default: on a VM whose host
// backs guest memory lazily, first touching fresh huge pages ran 4x slower than 4 KiB ones
// (a checkpoint's first staging copy: 0.31 s -> 1.4 s), so only buffers that are reused get it.
enum class Pages : uint8_t { kDefault, kHuge };

class Buffer {
 public:
  static constexpr size_t kDefaultAlignment = 64;

  // An empty buffer: size 0, data() == nullptr.
  Buffer() = default;
  // Allocates `bytes` uninitialized bytes aligned to `alignment` (a power of two, at least
  // sizeof(void*); asserted). Throws std::bad_alloc when memory runs out, like std::vector; use
  // allocate() where running out of memory is an error to report.
  explicit Buffer(size_t bytes, size_t alignment = kDefaultAlignment,
                  Pages pages = Pages::kDefault);
  // As the constructor, but an exhausted allocator becomes an error Status naming the size.
  static Result<Buffer> allocate(size_t bytes, size_t alignment = kDefaultAlignment,
                                 Pages pages = Pages::kDefault);

  // How adopted memory is given back: fn(context, data, size), called once when the buffer is
  // destroyed or assigned over.
  struct Release {
    void (*fn)(void* context, void* data, size_t size) = nullptr;
    void* context = nullptr;
  };
  // Takes ownership of `size` bytes at `data` on `device` (not necessarily host-addressable),
  // which `release` frees. data may be null only when size is 0.
  static Buffer adopt(void* data, size_t size, Device device, Release release,
                      size_t alignment = kDefaultAlignment);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  size_t size() const { return size_; }
  // Where the bytes live; bytes() and data() of a device buffer are device addresses.
  Device device() const { return device_; }
  size_t alignment() const { return alignment_; }
  bool empty() const { return size_ == 0; }
  void* data() { return data_; }
  const void* data() const { return data_; }
  std::span<std::byte> bytes() { return {static_cast<std::byte*>(data_), size_}; }
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }

 private:
  Buffer(void* data, size_t size, size_t alignment, bool huge)
      : data_(data), size_(size), alignment_(alignment), huge_(huge) {}

  void* data_ = nullptr;
  size_t size_ = 0;
  size_t alignment_ = kDefaultAlignment;
  bool huge_ = false;  // a mapping of its own (free_streamed), not aligned_alloc's
  Device device_;
  Release release_;    // set for adopted memory, which is given back through it
  void free_storage();
};

}  // namespace ms
