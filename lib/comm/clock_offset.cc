// Ping-pong clock offset measurement; see clock_offset.h. Times travel as the 8 bytes of a
// double (DType::kU8), so no floating-point type beyond the toolkit's dtypes is needed.
#include "comm/clock_offset.h"

#include <cassert>
#include <chrono>
#include <cstdint>
#include <limits>

#include "core/timer.h"

namespace ms::comm {
namespace {

constexpr int kPingTag = 7101;
constexpr int kPongTag = 7102;

// Rank 0's side: answer each ping from `peer` with the current time.
Status serve_peer(Communicator& comm, int peer, int rounds) {
  for (int round = 0; round < rounds; ++round) {
    uint8_t ping = 0;
    MS_RETURN_IF_ERROR(comm.recv(&ping, 1, DType::kU8, peer, kPingTag));
    const double now = wall_time_s();
    MS_RETURN_IF_ERROR(comm.send(&now, sizeof(now), DType::kU8, peer, kPongTag));
  }
  return Status::OK();
}

Result<ClockOffset> ping_rank0(Communicator& comm, int rounds) {
  ClockOffset best{0, std::numeric_limits<double>::infinity()};
  for (int round = 0; round < rounds; ++round) {
    const uint8_t ping = 1;
    const double t1 = wall_time_s();
    MS_RETURN_IF_ERROR(comm.send(&ping, 1, DType::kU8, 0, kPingTag));
    double t0 = 0;
    MS_RETURN_IF_ERROR(comm.recv(&t0, sizeof(t0), DType::kU8, 0, kPongTag));
    const double t2 = wall_time_s();
    if (t2 - t1 < best.rtt_s) best = {(t1 + t2) / 2 - t0, t2 - t1};
  }
  return best;
}

}  // namespace

Result<ClockOffset> measure_clock_offset(Communicator& comm, int rounds) {
  assert(rounds >= 1);
  if (comm.rank() != 0) return ping_rank0(comm, rounds);
  for (int peer = 1; peer < comm.size(); ++peer) {
    MS_RETURN_IF_ERROR(serve_peer(comm, peer, rounds));
  }
  return ClockOffset{};
}

}  // namespace ms::comm
