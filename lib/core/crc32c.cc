#include "core/crc32c.h"

#include <array>
#include <cassert>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace ms {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // 0x1EDC6F41 bit-reversed

// kTables[0] is the classic byte-at-a-time table; kTables[k][b] advances the CRC of byte b
// through k further zero bytes, which lets the loop below fold 8 bytes per step.
using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? kPolynomial : 0u);
    t[0][b] = crc;
  }
  for (size_t k = 1; k < 8; ++k) {
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  }
  return t;
}

constexpr Tables kTables = make_tables();

// GF(2) polynomials modulo the CRC polynomial, in the CRC's reflected bit order (bit 31 is x^0,
// bit 0 is x^31). a * b mod P: for each term of a from x^0 up, add b, and multiply b by x.
constexpr uint32_t multiply_mod_p(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t term = 1u << 31; term != 0; term >>= 1) {
    if (a & term) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// kPowers[k] = x^(2^k) mod P, so x^n is a product of the entries n's set bits pick; 67 of
// them cover x^(8 * bytes) for any 64-bit byte count.
constexpr std::array<uint32_t, 67> make_powers() {
  std::array<uint32_t, 67> powers{};
  uint32_t p = 1u << 30;  // x^1
  for (uint32_t& entry : powers) {
    entry = p;
    p = multiply_mod_p(p, p);
  }
  return powers;
}

constexpr std::array<uint32_t, 67> kPowers = make_powers();

// x^(8 * bytes) mod P: what a CRC register is multiplied by when `bytes` zero bytes pass through
// it (the CRC is linear: register(s, A) = s * x^(8|A|) + register(0, A)).
constexpr uint32_t shift_bytes(uint64_t bytes) {
  uint32_t p = 1u << 31;  // x^0
  for (int k = 3; bytes != 0; bytes >>= 1, ++k) {
    if (bytes & 1u) p = multiply_mod_p(kPowers[static_cast<size_t>(k)], p);
  }
  return p;
}

uint32_t load_le32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint64_t crc32_word(uint64_t crc, const unsigned char* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return _mm_crc32_u64(crc, word);
}

// The register (not inverted) after n bytes from `crc`.
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const unsigned char* p, size_t n,
                                                         uint32_t crc) {
  for (; n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0; --n) crc = _mm_crc32_u8(crc, *p++);
  uint64_t crc64 = crc;
  // Blocks of three lanes: lane 0 continues the register, lanes 1 and 2 start from zero, and
  // by linearity the block's register is lane0 * x^(8 * 2L) + lane1 * x^(8 * L) + lane2.
  constexpr size_t kLane = kCrc32cInterleaveBytes / 3;
  if (n >= kCrc32cInterleaveBytes) {
    constexpr uint32_t shift_two_lanes = shift_bytes(2 * kLane);
    constexpr uint32_t shift_one_lane = shift_bytes(kLane);
    for (; n >= kCrc32cInterleaveBytes; n -= kCrc32cInterleaveBytes, p += kCrc32cInterleaveBytes) {
      uint64_t a = crc64, b = 0, c = 0;
      for (size_t i = 0; i < kLane; i += 8) {
        a = crc32_word(a, p + i);
        b = crc32_word(b, p + kLane + i);
        c = crc32_word(c, p + 2 * kLane + i);
      }
      crc64 = multiply_mod_p(shift_two_lanes, static_cast<uint32_t>(a)) ^
              multiply_mod_p(shift_one_lane, static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(c);
    }
  }
  for (; n >= 8; n -= 8, p += 8) crc64 = crc32_word(crc64, p);
  crc = static_cast<uint32_t>(crc64);
  for (; n > 0; --n) crc = _mm_crc32_u8(crc, *p++);
  return crc;
}
#endif

bool detect_hardware() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("sse4.2");
#else
  return false;
#endif
}

}  // namespace

uint32_t crc32c_software(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    const uint32_t lo = load_le32(p) ^ crc;
    const uint32_t hi = load_le32(p + 4);
    crc = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^ kTables[5][(lo >> 16) & 0xffu] ^
          kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu] ^ kTables[2][(hi >> 8) & 0xffu] ^
          kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
  }
  for (; size > 0; --size) crc = (crc >> 8) ^ kTables[0][(crc ^ *p++) & 0xffu];
  return ~crc;
}

bool crc32c_hardware_available() {
  static const bool available = detect_hardware();
  return available;
}

uint32_t crc32c_hardware(const void* data, size_t size, uint32_t crc) {
  assert(crc32c_hardware_available());
#if defined(__x86_64__)
  return ~crc32c_sse42(static_cast<const unsigned char*>(data), size, ~crc);
#else
  return crc32c_software(data, size, crc);
#endif
}

uint32_t crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // The inversions at both ends cancel: the register after A, run through len_b more bytes,
  // differs from B's own register by A's final value times x^(8 len_b).
  return multiply_mod_p(shift_bytes(len_b), crc_a) ^ crc_b;
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  return crc32c_hardware_available() ? crc32c_hardware(data, size, crc)
                                     : crc32c_software(data, size, crc);
}

}  // namespace ms
