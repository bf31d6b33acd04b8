// copy_streaming: memcpy whose stores bypass the caches (non-temporal stores), for copying large
// blocks that the CPU will not read again soon, such as a checkpoint snapshot that the disk reads
// by DMA. Regular stores first read every destination line into the cache (read-for-ownership)
// and evict what the caller's own work keeps there; streaming stores do neither
// (docs/checkpoint.md, "Snapshot copies").
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/crc32c.h"

namespace ms {

// Copies n bytes from src to dst (which must not overlap), with AVX2 streaming stores where the
// CPU has them and memcpy otherwise; the stores are fenced before it returns, so the bytes are
// visible to other threads as after memcpy.
void copy_streaming(void* dst, const void* src, size_t n);

// copy_streaming that also returns the CRC-32C of the bytes (continuing from `crc`, as crc32c()
// does). It copies kCopyCrcPieceBytes at a time and checksums each piece from the source right
// after copying it, while the piece is still in the cache, so memory is read once for both.
inline constexpr size_t kCopyCrcPieceBytes = 4 * kCrc32cInterleaveBytes;
uint32_t copy_streaming_crc32c(void* dst, const void* src, size_t n, uint32_t crc = 0);

}  // namespace ms
