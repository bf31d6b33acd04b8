// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of checkpoint
// shards and dataset files. Chosen over CRC-32 (zlib) because x86 CPUs since SSE4.2 (and ARMv8)
// compute it in hardware at many GB/s, and it is what iSCSI, ext4 and LevelDB use. The hardware
// path is picked at run time with cpuid; a slicing-by-8 table version runs everywhere else.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ms {

// CRC-32C of `size` bytes at `data`, continuing from `crc` (the CRC of the bytes before them; 0
// to start), so crc32c(b, nb, crc32c(a, na)) == crc32c of a followed by b.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The CRC-32C of A followed by B, from crc_a = crc32c(A), crc_b = crc32c(B) and B's length:
// checksums of pieces computed apart (by several threads, or while copying them) give the
// checksum of the whole without reading it again. O(log len_b) small GF(2) products.
uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

// The two implementations behind crc32c(), exposed so tests can compare them.
uint32_t crc32c_software(const void* data, size_t size, uint32_t crc = 0);
// True when this CPU has the SSE4.2 crc32 instruction (always false off x86-64).
bool crc32c_hardware_available();
// Requires crc32c_hardware_available() (asserted). Inputs of kCrc32cInterleaveBytes or more run
// three independent streams over thirds of each block, since one crc32 instruction's result
// feeds the next and a single stream waits out its latency (2.0x one stream's rate measured,
// docs/core.md).
inline constexpr size_t kCrc32cInterleaveBytes = 3 * 16384;
uint32_t crc32c_hardware(const void* data, size_t size, uint32_t crc = 0);

}  // namespace ms
