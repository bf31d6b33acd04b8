#include "core/philox.h"

#include <cmath>
#include <numbers>

namespace ms {
namespace {

// Top 24 bits as a float in [0, 1): exact, and never rounds up to 1.
float unit_float(uint32_t word) { return static_cast<float>(word >> 8) * 0x1p-24f; }

// Box-Muller on two words; `second` picks the sine branch. Computed in double so the float
// result barely depends on libm rounding; the radius word is mapped to (0, 1] so log() is finite.
float box_muller(uint32_t radius_word, uint32_t angle_word, bool second) {
  const double u_radius = (static_cast<double>(radius_word) + 1.0) * 0x1p-32;
  const double angle = 2.0 * std::numbers::pi * static_cast<double>(angle_word) * 0x1p-32;
  const double radius = std::sqrt(-2.0 * std::log(u_radius));
  return static_cast<float>(radius * (second ? std::sin(angle) : std::cos(angle)));
}

float normal_from_block(const PhiloxCounter& words, uint64_t lane) {
  const uint64_t pair = lane & ~uint64_t{1};
  return box_muller(words[pair], words[pair + 1], lane & 1);
}

// Calls emit(i, words, lane) for i in [0, n), computing each Philox block once.
template <typename Emit>
void for_each_element(size_t n, uint64_t seed, uint64_t stream, uint64_t first_index, Emit emit) {
  size_t i = 0;
  while (i < n) {
    const uint64_t index = first_index + i;
    const PhiloxCounter words = philox_block(seed, stream, index / 4);
    for (uint64_t lane = index % 4; lane < 4 && i < n; ++lane, ++i) emit(i, words, lane);
  }
}

}  // namespace

float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return unit_float(philox_block(seed, stream, index / 4)[index % 4]);
}

float normal(uint64_t seed, uint64_t stream, uint64_t index) {
  return normal_from_block(philox_block(seed, stream, index / 4), index % 4);
}

void fill_uniform(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                  float lo, float hi) {
  const float width = hi - lo;
  for_each_element(out.size(), seed, stream, first_index,
                   [&](size_t i, const PhiloxCounter& words, uint64_t lane) {
                     out[i] = lo + width * unit_float(words[lane]);
                   });
}

void fill_normal(std::span<float> out, uint64_t seed, uint64_t stream, uint64_t first_index,
                 float mean, float std) {
  for_each_element(out.size(), seed, stream, first_index,
                   [&](size_t i, const PhiloxCounter& words, uint64_t lane) {
                     out[i] = mean + std * normal_from_block(words, lane);
                   });
}

}  // namespace ms
