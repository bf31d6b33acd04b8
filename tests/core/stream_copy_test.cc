// copy_streaming copies exactly what memcpy does, for every destination and source alignment
// and for sizes around the streaming threshold and its 128-byte blocks.
#include "core/stream_copy.h"

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

}  // namespace
}  // namespace ms
