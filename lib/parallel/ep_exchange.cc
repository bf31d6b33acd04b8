// Expert parallelism's exchange (ep_exchange.h): the count exchange, the chunked all-to-all
// round trip in f32 or bf16 and its statistics.
#include "parallel/ep_exchange.h"

#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/timer.h"

namespace ms::parallel {
namespace {

template <typename T>
DType wire_dtype();
template <>
DType wire_dtype<float>() { return DType::kF32; }
template <>
DType wire_dtype<uint16_t>() { return DType::kBF16; }

void to_wire(float* to, const float* from, int64_t n) {
  std::memcpy(to, from, static_cast<size_t>(n) * sizeof(float));
}
void to_wire(uint16_t* to, const float* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] = float_to_bf16(from[i]);
}
void from_wire(float* to, const float* from, int64_t n) {
  std::memcpy(to, from, static_cast<size_t>(n) * sizeof(float));
}
void from_wire(float* to, const uint16_t* from, int64_t n) {
  for (int64_t i = 0; i < n; ++i) to[i] = bf16_to_float(from[i]);
}

// Index helpers over an EpPlan. send/recv counts are [peer][chunk][local expert].
struct PlanIndex {
  const EpPlan& p;
  int64_t P, C, El;
  int64_t sent(int64_t j, int64_t c, int64_t e) const {
    return p.send_counts[static_cast<size_t>((j * C + c) * El + e)];
  }
  int64_t received(int64_t s, int64_t c, int64_t e) const {
    return p.recv_counts[static_cast<size_t>((s * C + c) * El + e)];
  }
  // First dispatch row of (peer j, chunk c, local expert e).
  int64_t dispatch_row(int64_t j, int64_t c, int64_t e) const {
    return p.dispatch_rows[static_cast<size_t>((j * C + c) * El + e)];
  }
  // First row at the experts of chunk c, local expert e, source s.
  int64_t expert_row(int64_t c, int64_t e, int64_t s) const {
    int64_t row = p.rows[static_cast<size_t>(c * El + e)];
    for (int64_t t = 0; t < s; ++t) row += received(t, c, e);
    return row;
  }
};

}  // namespace

void ExpertExchange::plan_routing(const ops::MoeRouting& routing, TpChunk tokens, EpPlan& p) {
  const int64_t El = local_experts, P = size;
  const int C = tp_chunk_count(chunks, tokens.rows);
  p.chunks = std::max(C, 1);
  const int64_t Cn = p.chunks;
  const std::vector<int64_t>& offsets = routing.offsets;
  const std::vector<int64_t>& token = routing.token_of_row;
  p.send_counts.assign(static_cast<size_t>(P * Cn * El), 0);
  p.dispatch_rows.assign(static_cast<size_t>(P * Cn * El), 0);
  // An expert's rows are in token order: walk them once, cutting at the chunks' first tokens.
  for (int64_t j = 0; j < P; ++j) {
    for (int64_t e = 0; e < El; ++e) {
      int64_t row = offsets[static_cast<size_t>(j * El + e)];
      const int64_t end = offsets[static_cast<size_t>(j * El + e + 1)];
      while (row < end && token[static_cast<size_t>(row)] < tokens.row0) ++row;
      for (int64_t c = 0; c < Cn; ++c) {
        const TpChunk chunk = tp_chunk(tokens.rows, static_cast<int>(Cn), static_cast<int>(c));
        const int64_t first = row;
        const int64_t limit = tokens.row0 + chunk.row0 + chunk.rows;
        while (row < end && token[static_cast<size_t>(row)] < limit) ++row;
        const size_t at = static_cast<size_t>((j * Cn + c) * El + e);
        p.dispatch_rows[at] = first;
        p.send_counts[at] = row - first;
      }
    }
  }
  plan(p);
}

void ExpertExchange::plan(EpPlan& p) {
  const int64_t El = local_experts, P = size, C = p.chunks;
  p.recv_counts.assign(static_cast<size_t>(P * C * El), 0);
  p.rows.assign(static_cast<size_t>(C * El + 1), 0);
  if (!error.ok()) return;
  const double t0 = wall_time_s();
  error = comm->alltoall(p.send_counts.data(), p.recv_counts.data(),
                         static_cast<size_t>(C * El), DType::kI64);
  const double spent = wall_time_s() - t0;
  stats.active_s += spent;
  stats.exposed_s += spent;
  const PlanIndex index{p, P, C, El};
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t e = 0; e < El; ++e) {
      int64_t rows = 0;
      for (int64_t s = 0; s < P; ++s) rows += index.received(s, c, e);
      const size_t at = static_cast<size_t>(c * El + e);
      p.rows[at + 1] = p.rows[at] + rows;
    }
  }
}

Status ExpertExchange::poll() {
  const double t0 = wall_time_s();
  Status status = Status::OK();
  for (Flight& f : flights) {
    if (f.done) continue;
    Result<bool> done = f.request.test();
    if (!done.ok()) {
      status = done.status();
      break;
    }
    if (*done) {
      f.done = true;
      stats.active_s += wall_time_s() - f.issued;
    }
  }
  stats.exposed_s += wall_time_s() - t0;
  if (!status.ok() && error.ok()) error = status;
  return status;
}

namespace {

// The round trip of one chunked exchange with wire type T (float, or uint16_t holding bf16).
template <typename T>
class RoundTrip {
 public:
  RoundTrip(ExpertExchange& ep, const EpPlan& p, int64_t width, std::vector<T>& dispatch_send,
            std::vector<T>& dispatch_recv, std::vector<T>& combine_send,
            std::vector<T>& combine_recv)
      : ep_(ep), plan_{p, ep.size, p.chunks, ep.local_experts}, width_(width),
        ds_(dispatch_send), dr_(dispatch_recv), cs_(combine_send), cr_(combine_recv) {
    const int64_t P = plan_.P, C = plan_.C;
    send_.assign(static_cast<size_t>(C), std::vector<size_t>(static_cast<size_t>(P), 0));
    recv_ = send_;
    send_at_.assign(static_cast<size_t>(C + 1), 0);
    recv_at_.assign(static_cast<size_t>(C + 1), 0);
    for (int64_t c = 0; c < C; ++c) {
      int64_t out = 0, in = 0;
      for (int64_t j = 0; j < P; ++j) {
        int64_t rows_out = 0, rows_in = 0;
        for (int64_t e = 0; e < plan_.El; ++e) {
          rows_out += plan_.sent(j, c, e);
          rows_in += plan_.received(j, c, e);
        }
        send_[static_cast<size_t>(c)][static_cast<size_t>(j)] = static_cast<size_t>(rows_out * width);
        recv_[static_cast<size_t>(c)][static_cast<size_t>(j)] = static_cast<size_t>(rows_in * width);
        if (j != ep.rank) bytes_ += static_cast<uint64_t>(rows_out * width) * sizeof(T);
        out += rows_out;
        in += rows_in;
      }
      send_at_[static_cast<size_t>(c + 1)] = send_at_[static_cast<size_t>(c)] + out;
      recv_at_[static_cast<size_t>(c + 1)] = recv_at_[static_cast<size_t>(c)] + in;
    }
    ds_.resize(static_cast<size_t>(send_at_.back() * width));
    dr_.resize(static_cast<size_t>(recv_at_.back() * width));
    cs_.resize(static_cast<size_t>(recv_at_.back() * width));
    cr_.resize(static_cast<size_t>(send_at_.back() * width));
  }

  // rows: (dispatch rows, width) -> at: rows at the experts (EpPlan::rows' layout); compute(c) fills
  // chunk c's rows of `results` (same layout), which come back into `back` in dispatch order.
  void run(const float* rows, float* at, const float* results, float* back,
           const std::function<void()>& before, const std::function<void(int)>& compute) {
    const int64_t C = plan_.C;
    const bool overlap = C > 1;
    ep_.flights.clear();
    ep_.flights.resize(static_cast<size_t>(2 * C));
    pack_dispatch(rows);
    issue(0, true);
    if (!overlap) wait(0);
    if (before) before();
    for (int64_t c = 0; c < C; ++c) {
      wait(2 * c);
      if (c + 1 < C) issue(c + 1, true);
      unpack_at_experts(c, at);
      compute(static_cast<int>(c));
      pack_results(c, results);
      issue(c, false);
      if (!overlap) wait(2 * c + 1);
    }
    for (int64_t c = 0; c < C; ++c) wait(2 * c + 1);
    unpack_back(back);
    ep_.flights.clear();
    ep_.stats.collectives += 2 * C;
    ep_.stats.bytes += 2 * bytes_;
  }

 private:
  T* seg(std::vector<T>& buf, const std::vector<int64_t>& at, int64_t c) {
    return buf.data() + at[static_cast<size_t>(c)] * width_;
  }

  void pack_dispatch(const float* rows) {
    T* to = ds_.data();
    for (int64_t c = 0; c < plan_.C; ++c) {
      for (int64_t j = 0; j < plan_.P; ++j) {
        for (int64_t e = 0; e < plan_.El; ++e) {
          const int64_t n = plan_.sent(j, c, e) * width_;
          to_wire(to, rows + plan_.dispatch_row(j, c, e) * width_, n);
          to += n;
        }
      }
    }
  }
  void unpack_at_experts(int64_t c, float* at) {
    const T* from = seg(dr_, recv_at_, c);
    for (int64_t s = 0; s < plan_.P; ++s) {
      for (int64_t e = 0; e < plan_.El; ++e) {
        const int64_t n = plan_.received(s, c, e) * width_;
        from_wire(at + plan_.expert_row(c, e, s) * width_, from, n);
        from += n;
      }
    }
  }
  void pack_results(int64_t c, const float* results) {
    T* to = seg(cs_, recv_at_, c);
    for (int64_t s = 0; s < plan_.P; ++s) {
      for (int64_t e = 0; e < plan_.El; ++e) {
        const int64_t n = plan_.received(s, c, e) * width_;
        to_wire(to, results + plan_.expert_row(c, e, s) * width_, n);
        to += n;
      }
    }
  }
  void unpack_back(float* back) {
    const T* from = cr_.data();
    for (int64_t c = 0; c < plan_.C; ++c) {
      for (int64_t j = 0; j < plan_.P; ++j) {
        for (int64_t e = 0; e < plan_.El; ++e) {
          const int64_t n = plan_.sent(j, c, e) * width_;
          from_wire(back + plan_.dispatch_row(j, c, e) * width_, from, n);
          from += n;
        }
      }
    }
  }

  // Flight 2c is chunk c's dispatch, 2c + 1 its combine.
  void issue(int64_t c, bool dispatch) {
    if (!ep_.error.ok()) return;
    const double t0 = wall_time_s();
    const size_t ci = static_cast<size_t>(c);
    Result<comm::Request> r =
        dispatch ? ep_.comm->ialltoallv(seg(ds_, send_at_, c), send_[ci], seg(dr_, recv_at_, c),
                                        recv_[ci], wire_dtype<T>())
                 : ep_.comm->ialltoallv(seg(cs_, recv_at_, c), recv_[ci], seg(cr_, send_at_, c),
                                        send_[ci], wire_dtype<T>());
    ExpertExchange::Flight& f = ep_.flights[static_cast<size_t>(2 * c + (dispatch ? 0 : 1))];
    f.issued = t0;
    if (r.ok()) {
      f.request = std::move(*r);
      f.done = false;
    } else {
      ep_.error = r.status();
      f.done = true;
    }
    ep_.stats.exposed_s += wall_time_s() - t0;
  }
  void wait(int64_t flight) {
    ExpertExchange::Flight& f = ep_.flights[static_cast<size_t>(flight)];
    if (f.done || !ep_.error.ok()) return;
    const double t0 = wall_time_s();
    const Status s = f.request.wait();
    const double t1 = wall_time_s();
    f.done = true;
    ep_.stats.active_s += t1 - f.issued;
    ep_.stats.exposed_s += t1 - t0;
    if (!s.ok() && ep_.error.ok()) ep_.error = s;
  }

  ExpertExchange& ep_;
  PlanIndex plan_;
  int64_t width_;
  std::vector<T>& ds_;
  std::vector<T>& dr_;
  std::vector<T>& cs_;
  std::vector<T>& cr_;
  std::vector<std::vector<size_t>> send_, recv_;  // [chunk][peer] floats, as the wire counts
  std::vector<int64_t> send_at_, recv_at_;        // chunk c's first wire row
  uint64_t bytes_ = 0;                            // one direction, to other ranks
};

}  // namespace

void ExpertExchange::round_trip(const EpPlan& p, const float* rows, float* at,
                                const float* results, float* back, int64_t width,
                                const std::function<void()>& before,
                                const std::function<void(int)>& compute) {
  if (bf16) {
    RoundTrip<uint16_t> trip(*this, p, width, bf16_wire[0], bf16_wire[1], bf16_wire[2],
                             bf16_wire[3]);
    trip.run(rows, at, results, back, before, compute);
  } else {
    RoundTrip<float> trip(*this, p, width, f32_wire[0], f32_wire[1], f32_wire[2], f32_wire[3]);
    trip.run(rows, at, results, back, before, compute);
  }
}

}  // namespace ms::parallel
