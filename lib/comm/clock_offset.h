// Clock offset of this rank against rank 0, for aligning per-rank traces (clocks of different
// hosts are never assumed synchronized). NTP-style ping-pong: the rank notes its clock t1, rank 0
// answers with its clock t0, the rank notes t2 on arrival; assuming symmetric delays,
// offset = (t1 + t2) / 2 - t0. Of several rounds the one with the smallest round trip
// (t2 - t1) is kept, since it bounds the asymmetry error best.
#pragma once

#include "comm/communicator.h"
#include "core/status.h"

namespace ms::comm {

struct ClockOffset {
  double offset_s = 0;  // local wall time - offset_s = rank 0's wall time
  double rtt_s = 0;     // round trip of the kept sample; the offset is good to about rtt_s / 2
};

// Collective over `comm`: rank 0 serves every other rank in turn, `rounds` exchanges each
// (rounds >= 1). Rank 0 gets {0, 0}. Times are wall-clock seconds since the Unix epoch.
// Returns the communicator's error if a send or receive fails.
Result<ClockOffset> measure_clock_offset(Communicator& comm, int rounds = 8);

}  // namespace ms::comm
