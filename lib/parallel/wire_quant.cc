// Group quantization for the wire; see wire_quant.h for the format.
#include "parallel/wire_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/quant.h"

namespace ms::parallel {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

int64_t code_bytes(int64_t n, int bits) { return bits == 4 ? (n + 1) / 2 : n; }

// The code of value t = x / s: floor(t + u) or the nearest integer, within [-qmax, qmax].
template <bool kStochastic>
int code_of(float t, int qmax, uint64_t key, uint64_t index) {
  float r = kStochastic ? std::floor(t + rounding_uniform(key, index)) : std::nearbyint(t);
  r = std::clamp(r, static_cast<float>(-qmax), static_cast<float>(qmax));
  return static_cast<int>(r);
}

// One group: its scale, then its codes; with `lost`, what each value lost (x - q s, the same
// float the decoder forms). Returns the bytes written.
template <int kBits, bool kStochastic>
int64_t encode_group(const float* x, int64_t n, uint64_t key, uint64_t first, uint8_t* out,
                     float* lost) {
  constexpr int qmax = kBits == 4 ? 7 : 127;
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    finite = finite && std::isfinite(x[i]);
    amax = std::max(amax, std::fabs(x[i]));
  }
  const float scale =
      finite ? amax / static_cast<float>(qmax) : std::numeric_limits<float>::quiet_NaN();
  std::memcpy(out, &scale, sizeof(float));
  uint8_t* codes = out + sizeof(float);
  const int64_t bytes = static_cast<int64_t>(sizeof(float)) + code_bytes(n, kBits);
  if (!(scale > 0.0f)) {  // all zero (codes 0), or not finite (a NaN scale)
    std::memset(codes, kBits == 4 ? 0x88 : 0, static_cast<size_t>(code_bytes(n, kBits)));
    if (lost != nullptr) {
      for (int64_t i = 0; i < n; ++i) lost[i] = x[i] - 0.0f * scale;
    }
    return bytes;
  }
  const float inv = 1.0f / scale;
  auto code = [&](int64_t i) {
    const int c = code_of<kStochastic>(x[i] * inv, qmax, key, first + static_cast<uint64_t>(i));
    if (lost != nullptr) lost[i] = x[i] - static_cast<float>(c) * scale;
    return c;
  };
  if constexpr (kBits == 8) {
    for (int64_t i = 0; i < n; ++i) codes[i] = static_cast<uint8_t>(static_cast<int8_t>(code(i)));
  } else {
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {
      const int lo = code(i), hi = code(i + 1);
      codes[i / 2] = static_cast<uint8_t>((lo + 8) | ((hi + 8) << 4));
    }
    if (i < n) codes[i / 2] = static_cast<uint8_t>((code(i) + 8) | (8 << 4));
  }
  return bytes;
}

int64_t encode_group(const float* x, int64_t n, const WireQuant& q, uint64_t key, uint64_t first,
                     uint8_t* out, float* lost) {
  if (q.bits == 4) {
    return q.stochastic ? encode_group<4, true>(x, n, key, first, out, lost)
                        : encode_group<4, false>(x, n, key, first, out, lost);
  }
  return q.stochastic ? encode_group<8, true>(x, n, key, first, out, lost)
                      : encode_group<8, false>(x, n, key, first, out, lost);
}

template <bool kAdd>
int64_t decode_group(const uint8_t* in, int64_t n, int bits, float* dst) {
  float scale;
  std::memcpy(&scale, in, sizeof(float));
  const uint8_t* codes = in + sizeof(float);
  for (int64_t i = 0; i < n; ++i) {
    const int code =
        bits == 8 ? static_cast<int>(static_cast<int8_t>(codes[i])) : ops::int4_code(codes, i);
    const float v = static_cast<float>(code) * scale;
    if constexpr (kAdd) {
      dst[i] += v;
    } else {
      dst[i] = v;
    }
  }
  return static_cast<int64_t>(sizeof(float)) + code_bytes(n, bits);
}

int64_t decode_raw(const uint8_t* in, int64_t n, bool add, float* dst) {
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, in + i * 4, 4);
    dst[i] = add ? dst[i] + v : v;
  }
  return n * 4;
}

}  // namespace

uint64_t rounding_key(std::initializer_list<uint64_t> parts) {
  uint64_t key = 0x6a09e667f3bcc908ULL;
  for (uint64_t p : parts) key = splitmix64(key ^ splitmix64(p));
  return key;
}

float rounding_uniform(uint64_t key, uint64_t index) {
  // The top 24 bits: every such float is exact, and the largest is below 1.
  return static_cast<float>(splitmix64(key ^ (index * 0xd1b54a32d192ed03ULL)) >> 40) *
         (1.0f / 16777216.0f);
}

int64_t quantized_bytes(int64_t n, const WireQuant& q) {
  if (n <= 0) return 0;
  const int64_t groups = (n + q.group_size - 1) / q.group_size;
  const int64_t full = n / q.group_size, tail = n % q.group_size;
  return groups * static_cast<int64_t>(sizeof(float)) + full * code_bytes(q.group_size, q.bits) +
         code_bytes(tail, q.bits);
}

int64_t message_bytes(std::span<const WireRun> runs, const WireQuant& q) {
  int64_t bytes = 0;
  for (const WireRun& run : runs) {
    bytes += run.compressed ? quantized_bytes(run.length, q) : run.length * 4;
  }
  return bytes;
}

void encode_message(const float* values, std::span<const WireRun> runs, const WireQuant& q,
                    uint64_t key, uint8_t* out, float* lost) {
  for (const WireRun& run : runs) {
    const float* x = values + run.offset;
    float* run_lost = lost == nullptr ? nullptr : lost + run.offset;
    if (!run.compressed) {
      std::memcpy(out, x, static_cast<size_t>(run.length) * 4);
      out += run.length * 4;
      if (run_lost != nullptr) {
        for (int64_t i = 0; i < run.length; ++i) run_lost[i] = x[i] - x[i];
      }
      continue;
    }
    for (int64_t g = 0; g < run.length; g += q.group_size) {
      out += encode_group(x + g, std::min(q.group_size, run.length - g), q, key,
                          static_cast<uint64_t>(run.offset + g), out,
                          run_lost == nullptr ? nullptr : run_lost + g);
    }
  }
}

void decode_message(const uint8_t* in, std::span<const WireRun> runs, const WireQuant& q,
                    float* dst, Decode mode) {
  for (const WireRun& run : runs) {
    float* out = dst + run.offset;
    if (!run.compressed) {
      in += decode_raw(in, run.length, mode == Decode::kAdd, out);
      continue;
    }
    for (int64_t g = 0; g < run.length; g += q.group_size) {
      const int64_t n = std::min(q.group_size, run.length - g);
      in += mode == Decode::kSet ? decode_group<false>(in, n, q.bits, out + g)
                                 : decode_group<true>(in, n, q.bits, out + g);
    }
  }
}

void hadamard_blocks(float* values, int64_t n) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(kHadamardBlock));
  for (int64_t b = 0; b + kHadamardBlock <= n; b += kHadamardBlock) {
    float* x = values + b;
    for (int64_t h = 1; h < kHadamardBlock; h *= 2) {
      for (int64_t i = 0; i < kHadamardBlock; i += 2 * h) {
        for (int64_t j = i; j < i + h; ++j) {
          const float a = x[j], c = x[j + h];
          x[j] = a + c;
          x[j + h] = a - c;
        }
      }
    }
    for (int64_t i = 0; i < kHadamardBlock; ++i) x[i] *= norm;
  }
}

void hadamard_runs(float* values, std::span<const WireRun> runs) {
  for (const WireRun& run : runs) {
    if (run.compressed) hadamard_blocks(values + run.offset, run.length);
  }
}

}  // namespace ms::parallel
