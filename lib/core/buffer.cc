#include "core/buffer.h"

#include <bit>
#include <cassert>
#include <cstdlib>
#include <new>
#include <string>
#include <utility>

#include "core/huge_pages.h"

namespace ms {
namespace {

// Whether a buffer lives in its own huge-page backed mapping (core/huge_pages.h).
bool huge_page_backed(size_t bytes, size_t alignment, Pages pages) {
  return pages == Pages::kHuge && bytes >= kHugePageBytes && alignment <= kHugePageBytes;
}

// std::aligned_alloc requires the size to be a multiple of the alignment.
void* allocate_aligned(size_t bytes, size_t alignment, bool huge) {
  assert(std::has_single_bit(alignment) && alignment >= sizeof(void*));
  if (bytes == 0) return nullptr;
  if (huge) {
    try {
      return allocate_streamed(bytes);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  }
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded < bytes) return nullptr;  // the rounding overflowed size_t
  return std::aligned_alloc(alignment, rounded);
}

void free_aligned(void* data, size_t bytes, bool huge) {
  if (data == nullptr) return;
  if (huge) {
    free_streamed(data, bytes);
  } else {
    std::free(data);
  }
}

}  // namespace

Buffer::Buffer(size_t bytes, size_t alignment, Pages pages)
    : size_(bytes), alignment_(alignment), huge_(huge_page_backed(bytes, alignment, pages)) {
  data_ = allocate_aligned(bytes, alignment, huge_);
  if (bytes != 0 && data_ == nullptr) throw std::bad_alloc();
}

Result<Buffer> Buffer::allocate(size_t bytes, size_t alignment, Pages pages) {
  const bool huge = huge_page_backed(bytes, alignment, pages);
  void* data = allocate_aligned(bytes, alignment, huge);
  if (bytes != 0 && data == nullptr) {
    return Unavailable("out of memory: cannot allocate " + std::to_string(bytes) +
                       " bytes (alignment " + std::to_string(alignment) +
                       "); reduce the batch or model size, or use a machine with more memory");
  }
  return Buffer(data, bytes, alignment, huge);
}

Buffer Buffer::adopt(void* data, size_t size, Device device, Release release,
                     size_t alignment) {
  assert((data != nullptr || size == 0) && release.fn != nullptr);
  Buffer buffer(data, size, alignment, false);
  buffer.device_ = device;
  buffer.release_ = release;
  return buffer;
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      alignment_(other.alignment_),
      huge_(other.huge_),
      device_(std::exchange(other.device_, Device::host())),
      release_(std::exchange(other.release_, Release{})) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    free_storage();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    alignment_ = other.alignment_;
    huge_ = other.huge_;
    device_ = std::exchange(other.device_, Device::host());
    release_ = std::exchange(other.release_, Release{});
  }
  return *this;
}

void Buffer::free_storage() {
  if (release_.fn != nullptr) {
    if (data_ != nullptr) release_.fn(release_.context, data_, size_);
    return;
  }
  free_aligned(data_, size_, huge_);
}

Buffer::~Buffer() { free_storage(); }

}  // namespace ms
