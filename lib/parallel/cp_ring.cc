// Context parallelism's ring transfers (cp_ring.h).
#include "parallel/cp_ring.h"

#include <utility>

#include "core/timer.h"

namespace ms::parallel {

void CpRing::poll(RingHop& hop) {
  if (!hop.active || !error.ok()) return;
  const double t0 = wall_time_s();
  for (auto [request, done] : {std::pair{&hop.recv, &hop.received}, {&hop.send, &hop.sent}}) {
    if (*done) continue;
    Result<bool> r = request->test();
    if (!r.ok()) {
      error = r.status();
      break;
    }
    *done = *r;
  }
  const double t1 = wall_time_s();
  if (hop.sent && hop.received) {
    hop.active = false;
    stats.active_s += t1 - hop.issued;
  }
  stats.exposed_s += t1 - t0;
}

void CpRing::start_hop(RingHop& hop, const float* send, float* recv, int64_t n, int tag) {
  if (!error.ok()) return;
  const double t0 = wall_time_s();
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  Result<comm::Request> r = comm->irecv(recv, static_cast<size_t>(n), DType::kF32, prev, tag);
  Result<comm::Request> s = r.ok() ? comm->isend(send, static_cast<size_t>(n), DType::kF32,
                                                 next, tag)
                                   : Result<comm::Request>(r.status());
  if (!r.ok() || !s.ok()) {
    error = r.ok() ? s.status() : r.status();
  } else {
    hop.recv = std::move(*r);
    hop.send = std::move(*s);
    hop.issued = t0;
    hop.active = true;
    stats.bytes += static_cast<uint64_t>(n) * sizeof(float);
    ++stats.collectives;
  }
  stats.exposed_s += wall_time_s() - t0;
}

void CpRing::finish_hop(RingHop& hop) {
  if (!hop.active) return;
  const double t0 = wall_time_s();
  Status st = hop.received ? Status::OK() : hop.recv.wait();
  if (st.ok() && !hop.sent) st = hop.send.wait();
  const double t1 = wall_time_s();
  hop.active = false;
  stats.active_s += t1 - hop.issued;
  stats.exposed_s += t1 - t0;
  if (!st.ok() && error.ok()) error = st;
}

void CpRing::allgather(const void* send, void* recv, size_t count, DType dtype) {
  if (error.ok()) error = comm->allgather(send, recv, count, dtype);
}

}  // namespace ms::parallel
