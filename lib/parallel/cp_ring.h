// Context parallelism's ring: the transfers of ring attention's hops over the cp group, and
// the group's blocking gathers, with the first error and the transfer statistics. It knows
// nothing of attention: a hop moves n floats one step around the ring, a send to rank + 1 and
// a receive from rank - 1, while the caller computes on what it holds (parallel/ring_attention.h
// runs the attention math between start_hop and finish_hop, polling the hop between pieces,
// because MPI moves a nonblocking transfer only inside MPI calls).
//
// Errors: the first failed call is kept in `error` and every later transfer is skipped (the
// caller ends its step with it). Every rank of the group starts the same hops in the same order
// with the same tags (a hop is collective over cp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "comm/communicator.h"
#include "parallel/comm_stats.h"
#include "core/status.h"

namespace ms::parallel {

// The transfers of one ring step: a send to the next rank and a receive from the previous.
struct RingHop {
  comm::Request send, recv;
  double issued = 0;
  bool active = false;                  // started and not yet seen complete
  bool sent = false, received = false;  // seen complete by CpRing::poll
};

// This rank's place in the cp group's ring (cp = 1, comm null: no communication is ever asked
// of it). The caller sets the group; the ring adds to the statistics and the caller reads and
// resets them.
struct CpRing {
  comm::Communicator* comm = nullptr;  // null when cp = 1
  int size = 1, rank = 0;
  bool active() const { return size > 1; }
  Status error;  // the first failed transfer; later ones are skipped
  // Since the caller last reset them: ring transfers (collectives, one per hop), bytes sent,
  // their time in flight and the time spent waiting for them.
  CommStats stats;

  // Starts `hop`: n floats of `send` to rank + 1 and n floats from rank - 1 into `recv`, both
  // under `tag`. Both buffers must stay untouched until finish_hop. Skipped after an error.
  void start_hop(RingHop& hop, const float* send, float* recv, int64_t n, int tag);
  // Tests the hop's transfers; records its completion when seen.
  void poll(RingHop& hop);
  // Waits for whatever of the hop has not been seen complete.
  void finish_hop(RingHop& hop);
  // A blocking all-gather of `count` elements per rank over the group (recv: size * count, rank
  // r's block at r), for the few values a ring pass needs from every rank. Not counted in the
  // statistics (they are the ring's); skipped after an error, leaving recv as it was.
  void allgather(const void* send, void* recv, size_t count, DType dtype);
};

}  // namespace ms::parallel
