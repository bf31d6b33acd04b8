// ops::DeviceArray, the model's activation and scratch buffer (ops/device_array.h): resizing
// keeps the first elements and zeroes new ones, as std::vector does (the model relies on both:
// a MoE round trip fills a buffer chunk by chunk, and a few buffers are read where nothing
// wrote them); shrinking keeps the storage, so steady state allocates nothing; zeroed, assign
// and swap; read and write, the host's side; the storage lives on the backend's device.
#include <gtest/gtest.h>

#include <vector>

#include "ops/backend.h"
#include "ops/device_array.h"

namespace ms::ops {
namespace {

std::vector<float> contents(const DeviceArray& a) { return {a.data(), a.data() + a.size()}; }

TEST(DeviceArray, ResizeKeepsTheFirstElementsAndZeroesNewOnes) {
  Backend& be = cpu_backend();
  DeviceArray a;
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.data(), nullptr);
  float* p = a.resize(be, 4);
  for (int i = 0; i < 4; ++i) p[i] = static_cast<float>(i + 1);
  a.resize(be, 6);  // grows: a new allocation, the 4 values copied
  EXPECT_EQ(contents(a), (std::vector<float>{1, 2, 3, 4, 0, 0}));
  const float* storage = a.data();
  a.resize(be, 2);  // shrinks in place
  EXPECT_EQ(a.data(), storage);
  EXPECT_EQ(contents(a), (std::vector<float>{1, 2}));
  a.resize(be, 5);  // regrows within the storage: the dropped elements come back as zeros
  EXPECT_EQ(a.data(), storage);
  EXPECT_EQ(contents(a), (std::vector<float>{1, 2, 0, 0, 0}));
  EXPECT_EQ(a.device(), be.device());
}

TEST(DeviceArray, ZeroedAssignAndSwap) {
  Backend& be = cpu_backend();
  DeviceArray a, b;
  float* p = a.resize(be, 3);
  p[0] = 7;
  p[1] = 8;
  p[2] = 9;
  EXPECT_EQ(contents(a), (std::vector<float>{7, 8, 9}));
  a.zeroed(be, 4);
  EXPECT_EQ(contents(a), (std::vector<float>{0, 0, 0, 0}));
  const std::vector<float> src = {1.5f, -2.5f};
  b.assign(be, src.data(), src.size());
  EXPECT_EQ(contents(b), src);
  a.swap(b);
  EXPECT_EQ(contents(a), src);
  EXPECT_EQ(contents(b), (std::vector<float>{0, 0, 0, 0}));
  DeviceArray moved = std::move(a);
  EXPECT_EQ(contents(moved), src);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
}

TEST(DeviceArray, ReadAndWriteAreTheHostsSide) {
  Backend& be = cpu_backend();
  DeviceArray a;
  a.resize(be, 5);
  const std::vector<float> in = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(a.write(be, 1, in).ok());
  EXPECT_EQ(contents(a), (std::vector<float>{0, 1.5f, -2.0f, 3.25f, 0}));
  std::vector<float> out(2, 9.0f);
  ASSERT_TRUE(a.read(be, 2, out).ok());
  EXPECT_EQ(out, (std::vector<float>{-2.0f, 3.25f}));
  std::vector<float> none;
  EXPECT_TRUE(a.read(be, 5, none).ok());  // an empty range at the end
}

}  // namespace
}  // namespace ms::ops
