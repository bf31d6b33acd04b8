// Test support for the layer kernels' twin tests (CUDA builds only): a fixture that skips
// without a device, device arrays between sentinel guard bands, and element-by-element
// comparisons with a stated tolerance or bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/device.h"
#include "tests/ops/device_buffers.h"
#include "tests/ops/guarded.h"

namespace ms::test {

// Skips every test of a suite, with the runtime's reason, on machines without a CUDA device.
class GpuTwinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const Result<int> count = kernels::device_count();
    if (!count.ok()) GTEST_SKIP() << "no CUDA device: " << count.status().message();
  }
};

// A device array holding `initial` between two sentinel guard bands (copied with it), for a
// kernel to read and write; values() waits for the device, copies the array back and fails the
// test if a guard band changed.
template <typename T>
class DeviceGuarded {
 public:
  explicit DeviceGuarded(const std::vector<T>& initial)
      : host_(initial), buffer_(upload(host_.storage(), host_.storage_bytes() / sizeof(T))) {}

  T* get() { return buffer_.as<T>() + kGuardElements; }

  std::vector<T> values() {
    if (!succeeded(kernels::synchronize(nullptr))) return {};
    if (!succeeded(kernels::copy_to_host(host_.storage(), buffer_.data(),
                                         host_.storage_bytes()))) {
      return {};
    }
    EXPECT_TRUE(host_.guards_intact()) << "a kernel wrote outside its output";
    return std::vector<T>(host_.data(), host_.data() + host_.size());
  }

 private:
  Guarded<T> host_;
  kernels::DeviceBuffer buffer_;
};

// A device copy of a host input (no guard bands: kernels only read it).
template <typename T>
kernels::DeviceBuffer upload(const std::vector<T>& values) {
  return upload(values.data(), values.size());
}

// Expects |got[i] - want[i]| <= tolerance(want[i]) for every i; equal values (infinities
// included) and NaN pairs pass. Reports the first few misses with their index.
template <typename Tolerance>
void expect_near_all(const std::vector<float>& got, const std::vector<float>& want,
                     Tolerance tolerance, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = got[i], w = want[i];
    if (g == w || (std::isnan(g) && std::isnan(w))) continue;
    if (std::fabs(g - w) <= tolerance(w)) continue;
    ADD_FAILURE() << what << "[" << i << "]: gpu " << g << ", cpu " << w << ", tolerance "
                  << tolerance(w);
    if (++reported == 5) return;
  }
}

// |gpu - cpu| <= rel * (1 + |cpu|): the layer kernels' default for f32 results.
inline auto relative(double rel) {
  return [rel](double want) { return rel * (1.0 + std::fabs(want)); };
}
inline auto exact() {
  return [](double) { return 0.0; };
}

// The two vectors hold the same bits (a kernel run twice on the same input must repeat them).
template <typename T>
void expect_same_bits(const std::vector<T>& a, const std::vector<T>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(T)), 0)
      << what << ": two runs on the same input differ";
}

}  // namespace ms::test
