// copy_streaming copies exactly what memcpy does, for every destination and source alignment
// and for sizes around the streaming threshold and its 128-byte blocks; copy_streaming_crc32c
// also returns the checksum crc32c() gives, across its pieces.
#include "core/stream_copy.h"

#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace ms {
namespace {

TEST(StreamCopyTest, CopiesExactlyWhatMemcpyCopies) {
  std::mt19937 gen(11);
  std::vector<unsigned char> src(70000);
  for (unsigned char& c : src) c = static_cast<unsigned char>(gen());
  for (size_t n : {0u, 1u, 31u, 4095u, 4096u, 4097u, 4096u + 127u, 65536u + 33u}) {
    for (size_t dst_off : {0u, 1u, 17u, 32u}) {
      for (size_t src_off : {0u, 3u, 64u}) {
        std::vector<unsigned char> want(n + dst_off + 64, 0xAB), got = want;
        std::memcpy(want.data() + dst_off, src.data() + src_off, n);
        copy_streaming(got.data() + dst_off, src.data() + src_off, n);
        ASSERT_EQ(got, want) << "n " << n << " dst+" << dst_off << " src+" << src_off;
      }
    }
  }
}

TEST(StreamCopyTest, CopyWithChecksumCopiesAndChecksumsAcrossPieces) {
  std::mt19937 gen(12);
  std::vector<unsigned char> src(3 * kCopyCrcPieceBytes + 5000);
  for (unsigned char& c : src) c = static_cast<unsigned char>(gen());
  for (size_t n : {size_t{0}, size_t{100}, kCopyCrcPieceBytes, kCopyCrcPieceBytes + 1,
                   3 * kCopyCrcPieceBytes + 4999}) {
    std::vector<unsigned char> got(n + 8, 0xCD);
    const uint32_t crc = copy_streaming_crc32c(got.data() + 1, src.data() + 1, n, 0x1234u);
    EXPECT_EQ(crc, crc32c(src.data() + 1, n, 0x1234u)) << "n " << n;
    EXPECT_EQ(std::memcmp(got.data() + 1, src.data() + 1, n), 0) << "n " << n;
    EXPECT_EQ(got[0], 0xCD);
    EXPECT_EQ(got[n + 1], 0xCD);
  }
}

}  // namespace
}  // namespace ms
