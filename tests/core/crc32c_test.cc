// CRC-32C: known vectors, extension, and hardware == software on awkward lengths/alignments.
#include "core/crc32c.h"

#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/philox.h"

namespace ms {
namespace {

using CrcFn = uint32_t (*)(const void*, size_t, uint32_t);

struct Implementation {
  const char* name;
  CrcFn fn;
  bool available;
};

std::vector<Implementation> implementations() {
  return {{"dispatch", &crc32c, true},
          {"software", &crc32c_software, true},
          {"hardware", &crc32c_hardware, crc32c_hardware_available()}};
}

std::vector<unsigned char> bytes_of(size_t n, unsigned char start, int step) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(start + step * static_cast<int>(i));
  return v;
}

// "123456789" is the standard check string; the 32-byte vectors are from RFC 3720 (iSCSI) B.4.
TEST(Crc32c, KnownVectorsOnEveryImplementation) {
  for (const Implementation& impl : implementations()) {
    if (!impl.available) continue;
    SCOPED_TRACE(impl.name);
    EXPECT_EQ(impl.fn("123456789", 9, 0), 0xE3069283u);
    EXPECT_EQ(impl.fn(bytes_of(32, 0, 0).data(), 32, 0), 0x8A9136AAu);
    EXPECT_EQ(impl.fn(bytes_of(32, 0xff, 0).data(), 32, 0), 0x62A8AB43u);
    EXPECT_EQ(impl.fn(bytes_of(32, 0, 1).data(), 32, 0), 0x46DD794Eu);
    EXPECT_EQ(impl.fn(bytes_of(32, 31, -1).data(), 32, 0), 0x113FDB5Cu);
    EXPECT_EQ(impl.fn(nullptr, 0, 0), 0u);
  }
}

TEST(Crc32c, ExtendingEqualsChecksummingTheConcatenation) {
  const std::string a = "hello, ", b = "checkpoint shard";
  const std::string ab = a + b;
  EXPECT_EQ(crc32c(b.data(), b.size(), crc32c(a.data(), a.size())), crc32c(ab.data(), ab.size()));
  EXPECT_EQ(crc32c_software(b.data(), b.size(), crc32c_software(a.data(), a.size())),
            crc32c_software(ab.data(), ab.size()));
}

TEST(Crc32c, HardwareMatchesSoftwareOnOddLengthsAndAlignments) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "this CPU has no SSE4.2 crc32 instruction";
  std::vector<float> noise(1100);
  fill_uniform(noise, 7, stream_id("crc32c"), 0, 0.0f, 1.0f);
  const auto* data = reinterpret_cast<const unsigned char*>(noise.data());
  for (size_t offset = 0; offset < 9; ++offset) {
    for (size_t length : {0u, 1u, 7u, 8u, 9u, 15u, 63u, 64u, 65u, 1023u, 4095u}) {
      EXPECT_EQ(crc32c_hardware(data + offset, length, 0x12345678u),
                crc32c_software(data + offset, length, 0x12345678u))
          << "offset " << offset << " length " << length;
    }
  }
}

// Lengths around the three-lane blocks of the hardware path (whole blocks, blocks plus a tail,
// one short of a block), from unaligned starts.
TEST(Crc32c, HardwareMatchesSoftwareAcrossInterleavedBlocks) {
  if (!crc32c_hardware_available()) GTEST_SKIP() << "this CPU has no SSE4.2 crc32 instruction";
  std::vector<float> noise(3 * kCrc32cInterleaveBytes / 4 + 64);
  fill_uniform(noise, 11, stream_id("crc32c-blocks"), 0, -1.0f, 1.0f);
  const auto* data = reinterpret_cast<const unsigned char*>(noise.data());
  const size_t block = kCrc32cInterleaveBytes;
  for (size_t offset : {0u, 3u, 8u}) {
    for (size_t length : {block - 1, block, block + 1, block + 4099, 2 * block, 2 * block + 7}) {
      EXPECT_EQ(crc32c_hardware(data + offset, length, 0xdeadbeefu),
                crc32c_software(data + offset, length, 0xdeadbeefu))
          << "offset " << offset << " length " << length;
    }
  }
}

TEST(Crc32c, CombiningEqualsChecksummingTheConcatenation) {
  std::vector<unsigned char> data = bytes_of(70000, 5, 13);
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{69999}, size_t{70000}}) {
    const uint32_t a = crc32c(data.data(), split);
    const uint32_t b = crc32c(data.data() + split, data.size() - split);
    EXPECT_EQ(crc32c_combine(a, b, data.size() - split), crc32c(data.data(), data.size()))
        << "split at " << split;
  }
  // Three pieces combine left to right.
  const uint32_t p1 = crc32c(data.data(), 100), p2 = crc32c(data.data() + 100, 900);
  const uint32_t p3 = crc32c(data.data() + 1000, 69000);
  EXPECT_EQ(crc32c_combine(crc32c_combine(p1, p2, 900), p3, 69000),
            crc32c(data.data(), data.size()));
}

TEST(Crc32c, DetectsASingleBitFlip) {
  std::vector<unsigned char> data = bytes_of(4096, 3, 7);
  const uint32_t before = crc32c(data.data(), data.size());
  data[2049] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), before);
}

}  // namespace
}  // namespace ms
