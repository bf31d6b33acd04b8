// copy_streaming: memcpy whose stores bypass the caches (non-temporal stores), for copying large
// blocks that the CPU will not read again soon, such as a checkpoint snapshot that the disk reads
// by DMA. Regular stores first read every destination line into the cache (read-for-ownership)
// and evict what the caller's own work keeps there; streaming stores do neither
// (docs/checkpoint.md, "Snapshot copies").
#pragma once

#include <cstddef>

namespace ms {

// Copies n bytes from src to dst (which must not overlap), with AVX2 streaming stores where the
// CPU has them and memcpy otherwise; the stores are fenced before it returns, so the bytes are
// visible to other threads as after memcpy.
void copy_streaming(void* dst, const void* src, size_t n);

}  // namespace ms
