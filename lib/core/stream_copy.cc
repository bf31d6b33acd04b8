#include "core/stream_copy.h"

#include "core/crc32c.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ms {
namespace {

// Below this a streaming copy gains nothing: the fence and the unaligned head cost more.
constexpr size_t kMinStreamingBytes = 4096;

#if defined(__x86_64__)
__attribute__((target("avx2"))) void copy_streaming_avx2(unsigned char* dst,
                                                         const unsigned char* src, size_t n) {
  // Align the destination to 32 bytes with a plain copy; streaming stores need it.
  const size_t head = (32 - reinterpret_cast<uintptr_t>(dst) % 32) % 32;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 64));
    const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + 96), d);
  }
  _mm_sfence();  // streaming stores are weakly ordered: publish them before returning
  std::memcpy(dst + i, src + i, n - i);
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#endif

}  // namespace

void copy_streaming(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (n >= kMinStreamingBytes && has_avx2()) {
    copy_streaming_avx2(static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src),
                        n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

uint32_t copy_streaming_crc32c(void* dst, const void* src, size_t n, uint32_t crc) {
  auto* out = static_cast<unsigned char*>(dst);
  const auto* in = static_cast<const unsigned char*>(src);
  for (size_t at = 0; at < n; at += kCopyCrcPieceBytes) {
    const size_t piece = std::min(kCopyCrcPieceBytes, n - at);
    copy_streaming(out + at, in + at, piece);
    crc = crc32c(in + at, piece, crc);
  }
  return crc;
}

}  // namespace ms
