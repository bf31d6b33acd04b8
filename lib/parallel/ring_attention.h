// Context parallelism's ring attention (docs/train.md "Context parallelism"). Each cp rank
// holds T / cp tokens of every sequence, chunks r and 2cp-1-r (parallel/cp_layout.h), with its
// queries, keys and values after RoPE at their global positions. The key/value blocks travel
// around the ring: at step s rank r holds the block of rank r - s, computes its queries against
// it (the backend's attention_block_forward, with the mask the caller gives for that source:
// causal, sliding-window and document masks judged from global indices) and folds the result
// into its accumulator (attention_merge), while the block it will need next is already on its
// way (CpRing's hop, polled between pieces of the compute because MPI moves a nonblocking
// transfer only inside MPI calls).
//
// The backward runs the matching ring. A key block travels with the accumulator of its dK, dV:
// at step s rank r adds its queries' share of block r - s's gradients to the accumulator it
// received, and passes both on; after cp steps every accumulator is back at its owner. Only
// the accumulators' hop after each step's compute is exposed; the key block's hop overlaps it.
// Every rank of the group runs the same steps in the same order (both calls are collective
// over cp).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ops/attention.h"
#include "ops/backend.h"
#include "ops/device_array.h"
#include "parallel/cp_ring.h"

namespace ms::parallel {

// Working buffers of the ring, reused from call to call.
struct RingAttentionBuffers {
  ops::DeviceArray kv[2];     // [k | v] of the block held and of the one arriving
  ops::DeviceArray out, lse;  // a block's attention output and lse before the merge
  ops::DeviceArray grad[2];   // [dK | dV] accumulators held and arriving
  ops::DeviceArray piece[2];  // one query piece's attention output and lse
};

// The mask of this rank's queries against rank `source`'s keys, over all B x T of each.
using RingMask = std::function<ops::AttentionMask(int source)>;

// shape: this rank's (B, T local) attention; q (B*T, H*hd), k and v (B*T, KV*hd) this rank's
// rows after RoPE -> out (B*T, H*hd) and lse (B, H, T) over every rank's keys.
void ring_attention_forward(CpRing& ring, ops::Backend& be, const ops::AttentionShape& shape,
                            const RingMask& mask_of, const float* q, const float* k,
                            const float* v, float* out, float* lse, RingAttentionBuffers& buf);

// From dout (B*T, H*hd) and the forward's out and lse: accumulates dq (B*T, H*hd) and dk, dv
// (B*T, KV*hd) of this rank's rows, every rank's queries' share of them included.
void ring_attention_backward(CpRing& ring, ops::Backend& be, const ops::AttentionShape& shape,
                             const RingMask& mask_of, const float* q, const float* k,
                             const float* v, const float* out, const float* lse,
                             const float* dout, float* dq, float* dk, float* dv,
                             RingAttentionBuffers& buf);

}  // namespace ms::parallel
