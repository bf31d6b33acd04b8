// Test support shared by the ops and kernels tests: arrays with sentinel guard bands (to catch
// out-of-bounds writes), seeded random inputs, and widening of fp32/bf16/f16 to double.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"

namespace ms::test {

// Elements of sentinel bytes on each side of every output under test.
inline constexpr size_t kGuardElements = 16;
inline constexpr unsigned char kSentinelByte = 0xA5;

// n elements of T between two guard bands of sentinel bytes. The guard bands must still hold
// the sentinel after every call that writes the array.
template <typename T>
class Guarded {
 public:
  explicit Guarded(size_t n) : n_(n), storage_(n + 2 * kGuardElements) {
    std::memset(storage_.data(), kSentinelByte, storage_.size() * sizeof(T));
  }
  explicit Guarded(const std::vector<T>& values) : Guarded(values.size()) {
    std::memcpy(data(), values.data(), values.size() * sizeof(T));
  }

  T* data() { return storage_.data() + kGuardElements; }
  const T* data() const { return storage_.data() + kGuardElements; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return data()[i]; }
  const T& operator[](size_t i) const { return data()[i]; }
  // The whole allocation, guard bands included (for copying to and from a device).
  T* storage() { return storage_.data(); }
  size_t storage_bytes() const { return storage_.size() * sizeof(T); }

  bool guards_intact() const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(storage_.data());
    const size_t guard_bytes = kGuardElements * sizeof(T);
    const size_t tail = (kGuardElements + n_) * sizeof(T);
    for (size_t i = 0; i < guard_bytes; ++i) {
      if (bytes[i] != kSentinelByte || bytes[tail + i] != kSentinelByte) return false;
    }
    return true;
  }

 private:
  size_t n_;
  std::vector<T> storage_;
};

inline double widen(float v) { return v; }
inline double widen(bf16 v) { return bf16_to_float(v.bits); }
inline double widen(f16 v) { return f16_to_float(v.bits); }

// Uniform values in [lo, hi) from a fixed-seed generator: reproducible on every run.
inline std::vector<float> random_floats(size_t n, std::mt19937_64& rng, float lo = -4.0f,
                                        float hi = 4.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

// Arbitrary 32-bit patterns: every exponent, subnormals, infinities and NaNs.
inline std::vector<float> random_float_bits(size_t n, std::mt19937_64& rng) {
  std::vector<float> out(n);
  for (float& v : out) {
    const auto bits = static_cast<uint32_t>(rng());
    std::memcpy(&v, &bits, sizeof(v));
  }
  return out;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& x) {
  std::vector<bf16> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i].bits = float_to_bf16(x[i]);
  return out;
}

}  // namespace ms::test
