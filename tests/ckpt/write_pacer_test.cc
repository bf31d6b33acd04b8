// The checkpoint write pacer's arithmetic, on a clock the test drives: unpaced writers never
// wait; a paced one waits exactly until its bytes are due at the rate, not when behind; its
// pieces hold the pace within about 50 ms.
#include <gtest/gtest.h>

#include "ckpt/write_pacer.h"

namespace ms::ckpt {
namespace {

TEST(WritePacer, UnpacedNeverWaits) {
  WritePacer p(0, 100.0);
  EXPECT_FALSE(p.paced());
  EXPECT_EQ(p.wait_after(1ull << 30, 100.0), 0.0);
  EXPECT_EQ(p.chunk_bytes(), 8ull << 20);
}

TEST(WritePacer, WaitsUntilTheBytesAreDue) {
  WritePacer p(100e6, 10.0);  // 100 MB/s from t = 10 s
  EXPECT_TRUE(p.paced());
  EXPECT_NEAR(p.wait_after(50'000'000, 10.1), 0.4, 1e-12);  // due at 10.5
  EXPECT_NEAR(p.wait_after(50'000'000, 10.5), 0.5, 1e-12);  // 100 MB due at 11.0
  EXPECT_EQ(p.wait_after(10'000'000, 12.0), 0.0);           // behind schedule: no wait
  EXPECT_EQ(p.chunk_bytes(), 5'000'000u);                   // 50 ms at 100 MB/s
}

TEST(WritePacer, PiecesStayBetweenOneAndEightMiB) {
  EXPECT_EQ(WritePacer(1e6, 0).chunk_bytes(), 1u << 20);
  EXPECT_EQ(WritePacer(1e12, 0).chunk_bytes(), 8ull << 20);
}

}  // namespace
}  // namespace ms::ckpt
