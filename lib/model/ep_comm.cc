// Expert parallelism's exchanges (model_impl.h, EpState): the rows a MoE layer routed to
// experts on other ranks of the ep group go there by all-to-all(v) and come back the same way.
// Experts are numbered globally and ep rank r holds [r * E / ep, (r + 1) * E / ep), so the
// dispatch order (rows grouped by global expert) is already grouped by destination rank. The
// received rows arrive grouped by source rank, then expert; the experts want them grouped by
// expert, then source, so they are regrouped on the way in and back on the way out. Every
// rank of the group calls these in the same order (they are collective over ep).
#include <algorithm>
#include <cstring>

#include "core/half.h"
#include "core/timer.h"
#include "model/buffers.h"
#include "model/model_impl.h"

namespace ms::model {
namespace {

// Copies row blocks from `from`, laid out [a][b] (outer index a, block count counts[a * B + b]
// rows), into `to` laid out [b][a]. width floats per row.
void transpose_blocks(const float* from, float* to, const std::vector<int64_t>& counts,
                      int64_t A, int64_t B, int64_t width, bool a_major_source) {
  // Offsets of every block in the [a][b] and [b][a] layouts.
  std::vector<int64_t> ab(static_cast<size_t>(A * B)), ba(static_cast<size_t>(A * B));
  int64_t at = 0;
  for (int64_t a = 0; a < A; ++a) {
    for (int64_t b = 0; b < B; ++b) {
      ab[static_cast<size_t>(a * B + b)] = at;
      at += counts[static_cast<size_t>(a * B + b)];
    }
  }
  at = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t a = 0; a < A; ++a) {
      ba[static_cast<size_t>(a * B + b)] = at;
      at += counts[static_cast<size_t>(a * B + b)];
    }
  }
  for (size_t i = 0; i < ab.size(); ++i) {
    const int64_t src = a_major_source ? ab[i] : ba[i];
    const int64_t dst = a_major_source ? ba[i] : ab[i];
    std::memcpy(to + dst * width, from + src * width,
                static_cast<size_t>(counts[i] * width) * sizeof(float));
  }
}

}  // namespace

Status Transformer::Impl::ep_exchange(const float* send, const std::vector<size_t>& send_counts,
                                      float* recv, const std::vector<size_t>& recv_counts) {
  if (!ep.bf16) return ep.comm->alltoallv(send, send_counts, recv, recv_counts, DType::kF32);
  size_t out = 0, in = 0;
  for (size_t c : send_counts) out += c;
  for (size_t c : recv_counts) in += c;
  scratch.ep_wire_send.resize(out);
  scratch.ep_wire_recv.resize(in);
  for (size_t i = 0; i < out; ++i) scratch.ep_wire_send[i] = float_to_bf16(send[i]);
  MS_RETURN_IF_ERROR(ep.comm->alltoallv(scratch.ep_wire_send.data(), send_counts,
                                        scratch.ep_wire_recv.data(), recv_counts, DType::kBF16));
  for (size_t i = 0; i < in; ++i) recv[i] = bf16_to_float(scratch.ep_wire_recv[i]);
  return Status::OK();
}

void Transformer::Impl::ep_plan(MoeActs& m) {
  const int64_t El = ep.local_experts, P = ep.size;
  const std::vector<int64_t>& offsets = m.routing.offsets;
  std::vector<int64_t> send(static_cast<size_t>(P * El));
  m.ep_send_rows.assign(static_cast<size_t>(P), 0);
  for (int64_t j = 0; j < P; ++j) {
    for (int64_t e = 0; e < El; ++e) {
      const size_t g = static_cast<size_t>(j * El + e);
      send[g] = offsets[g + 1] - offsets[g];
      m.ep_send_rows[static_cast<size_t>(j)] += static_cast<size_t>(send[g]);
    }
  }
  m.ep_recv_counts.assign(static_cast<size_t>(P * El), 0);
  m.ep_recv_rows.assign(static_cast<size_t>(P), 0);
  m.ep_offsets.assign(static_cast<size_t>(El + 1), 0);
  if (!ep.error.ok()) return;
  const double t0 = wall_time_s();
  ep.error = ep.comm->alltoall(send.data(), m.ep_recv_counts.data(), static_cast<size_t>(El),
                               DType::kI64);
  ep.seconds += wall_time_s() - t0;
  for (int64_t src = 0; src < P; ++src) {
    for (int64_t e = 0; e < El; ++e) {
      const int64_t c = m.ep_recv_counts[static_cast<size_t>(src * El + e)];
      m.ep_recv_rows[static_cast<size_t>(src)] += static_cast<size_t>(c);
      m.ep_offsets[static_cast<size_t>(e + 1)] += c;
    }
  }
  for (size_t e = 0; e < static_cast<size_t>(El); ++e) m.ep_offsets[e + 1] += m.ep_offsets[e];
}

void Transformer::Impl::ep_to_experts(const MoeActs& m, const float* rows,
                                      std::vector<float>& out, int64_t width) {
  const int64_t El = ep.local_experts, P = ep.size, received = m.ep_offsets.back();
  std::vector<size_t> send(m.ep_send_rows), recv(m.ep_recv_rows);
  uint64_t bytes = 0;
  for (size_t j = 0; j < send.size(); ++j) {
    send[j] *= static_cast<size_t>(width);
    recv[j] *= static_cast<size_t>(width);
    if (static_cast<int>(j) != ep.rank) bytes += send[j] * (ep.bf16 ? 2 : sizeof(float));
  }
  float* tmp = sized(scratch.ep_tmp, received * width);
  float* dest = sized(out, received * width);
  if (!ep.error.ok()) return;
  const double t0 = wall_time_s();
  ep.error = ep_exchange(rows, send, tmp, recv);
  ep.seconds += wall_time_s() - t0;
  ++ep.exchanges;
  ep.bytes += bytes;
  transpose_blocks(tmp, dest, m.ep_recv_counts, P, El, width, true);
}

void Transformer::Impl::ep_from_experts(const MoeActs& m, const float* rows, float* out,
                                        int64_t width) {
  const int64_t El = ep.local_experts, P = ep.size, received = m.ep_offsets.back();
  std::vector<size_t> send(m.ep_recv_rows), recv(m.ep_send_rows);
  uint64_t bytes = 0;
  for (size_t j = 0; j < send.size(); ++j) {
    send[j] *= static_cast<size_t>(width);
    recv[j] *= static_cast<size_t>(width);
    if (static_cast<int>(j) != ep.rank) bytes += send[j] * (ep.bf16 ? 2 : sizeof(float));
  }
  float* tmp = sized(scratch.ep_tmp, received * width);
  transpose_blocks(rows, tmp, m.ep_recv_counts, P, El, width, false);
  if (!ep.error.ok()) return;
  const double t0 = wall_time_s();
  ep.error = ep_exchange(tmp, send, out, recv);
  ep.seconds += wall_time_s() - t0;
  ++ep.exchanges;
  ep.bytes += bytes;
}

}  // namespace ms::model
