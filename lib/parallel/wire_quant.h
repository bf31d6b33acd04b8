// Quantized wire formats for compressed data-parallel communication (docs/parallel.md,
// "Compressed data parallelism"): a run of f32 values is cut into groups of `group_size`
// consecutive values (the last one shorter), each sent as one f32 scale s = max|group| / qmax
// followed by its codes q, symmetric (qmax 127 for 8 bits, 7 for 4 bits; a value is q * s):
//   8 bits: one signed byte per value;
//   4 bits: two values a byte, the low nibble the even one, each as q + 8 (ops::int4_code).
// Rounding is to nearest (ties to even) or stochastic: q = floor(x / s + u) with u uniform in
// [0, 1), so that E[q * s] = x. The u of each value comes from a counter-based generator keyed by
// the caller (seed, step, bucket, rank, hop) and the value's index, so a run is reproducible
// bitwise and no generator state needs saving.
//
// A message mixes compressed and raw (f32) runs: WireRun says which; the per-tensor choice of
// what is worth compressing is the caller's.
//
// A group whose values are not all finite gets a NaN scale, so the receiver's sum, and with it
// the trainer's gradient norm, is not finite either: the trainer's check still fires.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ms::parallel {

struct WireQuant {
  int bits = 8;              // 8 or 4
  int64_t group_size = 2048;
  bool stochastic = true;
};

// One stretch of a message: `length` values at `offset` (relative to the values the message
// covers), quantized or sent as raw f32.
struct WireRun {
  int64_t offset = 0;
  int64_t length = 0;
  bool compressed = false;
  bool operator==(const WireRun&) const = default;
};

// A generator key from the caller's coordinates (mixed with splitmix64, order-sensitive).
uint64_t rounding_key(std::initializer_list<uint64_t> parts);
// The uniform in [0, 1) of value `index` under `key`.
float rounding_uniform(uint64_t key, uint64_t index);

// Bytes of `n` quantized values: one scale per group plus the codes.
int64_t quantized_bytes(int64_t n, const WireQuant& q);
// Bytes of a message made of `runs` (raw runs at 4 bytes a value).
int64_t message_bytes(std::span<const WireRun> runs, const WireQuant& q);

// Encodes `values` (the message's values, indexed by the runs' offsets) into `out`
// (message_bytes). Value i of the message draws its rounding from (key, i). With `lost`
// (indexed like `values`), also writes what each value of the runs lost: its value less the one
// the message stands for (0 for raw runs), for error feedback without a second decode pass.
void encode_message(const float* values, std::span<const WireRun> runs, const WireQuant& q,
                    uint64_t key, uint8_t* out, float* lost = nullptr);
// How a decoded value meets dst: added, stored, or added for quantized runs and stored for raw
// ones (a weight update that sends quantized differences and exact raw values).
enum class Decode { kAdd, kSet, kAddQuantizedSetRaw };
// Writes the values the message stands for into dst (indexed by the runs' offsets; values
// outside the runs are left alone).
void decode_message(const uint8_t* in, std::span<const WireRun> runs, const WireQuant& q,
                    float* dst, Decode mode);

// The orthonormal Walsh-Hadamard transform in place on each whole block of 32 values of the
// compressed runs (a run's tail shorter than 32 is left as it is). It is its own inverse, and it
// spreads an outlier over its block, so the block's scale no longer follows one large value.
inline constexpr int64_t kHadamardBlock = 32;
void hadamard_runs(float* values, std::span<const WireRun> runs);
void hadamard_blocks(float* values, int64_t n);

}  // namespace ms::parallel
