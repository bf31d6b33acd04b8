// Counter-based random numbers (Philox4x32-10, Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC'11). A draw is a pure function of (seed, stream, index), so any process can
// compute any element of a global tensor without generating the ones before it: parameter
// initialization is then identical under every parallel layout (docs/core.md).
//
// Keying: the Philox key is the 64-bit seed; the 128-bit counter is (block, stream), where
// block = index / 4 in its low 64 bits and the stream in its high 64 bits. One Philox block
// yields the four elements 4*block .. 4*block+3: lane k for uniform draws, and Box-Muller pairs
// (lanes 0,1) and (lanes 2,3) for normal draws.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

namespace ms {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// The raw Philox4x32 bijection with 10 rounds.
constexpr PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t p0 = uint64_t{kMul0} * counter[0];
    const uint64_t p1 = uint64_t{kMul1} * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return counter;
}

// The four 32-bit words of block `block` of (seed, stream).
constexpr PhiloxCounter philox_block(uint64_t seed, uint64_t stream, uint64_t block) {
  return philox4x32_10({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                        static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                       {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

// Element `index` of the uniform sequence of (seed, stream), in [0, 1) with 24 random bits.
float uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Element `index` of the standard normal sequence of (seed, stream) (mean 0, variance 1).
float normal(uint64_t seed, uint64_t stream, uint64_t index);

// out[i] = lo + (hi - lo) * uniform(seed, stream, first_index + i).
void fill_uniform(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                  float lo, float hi);
// out[i] = mean + std * normal(seed, stream, first_index + i).
void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                 float mean, float std);

// The stream of a named quantity (a parameter name such as "layers.3.attn.wq"): the 64-bit
// FNV-1a hash of its bytes, stable across platforms, compilers and releases.
constexpr uint64_t stream_id(std::string_view name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

}  // namespace ms
