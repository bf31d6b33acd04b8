// Expert parallelism's exchange: the rows a MoE layer routed to experts on other ranks of the
// ep group go there by all-to-all(v) and come back the same way. The exchange knows nothing of
// experts' math: plan_routing cuts a MoE routing's dispatch rows into chunks and counts them per
// (peer, chunk, local expert) (EpPlan), and the caller hands the experts' compute over as a
// callback that sees one chunk at a time.
//
// Experts are numbered globally and ep rank r holds local experts [r El, (r + 1) El), so a
// dispatch order that groups rows by global expert is already grouped by destination rank.
//
// Overlap (parallel.ep_overlap_chunks, as MegaScale-MoE and Comet do it): each chunk's rows make
// their round trip as their own pair of all-to-alls. While chunk c's experts compute, the
// dispatch of chunk c + 1 and the combine of chunk c - 1 are in flight, and the caller's
// `before` work runs while the first dispatch is. One chunk waits for each all-to-all as soon as
// it is issued: the reference without overlap.
//
// Layouts. The wire carries, per chunk, blocks in peer order and within a peer in local-expert
// order. At the experts a chunk's rows are stored grouped by local expert, then source peer
// (EpPlan::rows), so each expert can run one GEMM per chunk.
//
// Errors: the first failed call is kept in `error` and every later call of the exchange is
// skipped (the caller ends its step with it). Every rank of the group calls these in the same
// order with plans made of the same chunk count (they are collective over ep).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "comm/communicator.h"
#include "core/status.h"
#include "ops/moe.h"
#include "parallel/comm_stats.h"
#include "parallel/tp_overlap.h"

namespace ms::parallel {

// One round trip's row counts. counts are [peer][chunk][local expert], flattened.
struct EpPlan {
  int64_t chunks = 1;
  std::vector<int64_t> send_counts;    // rows this rank sends
  std::vector<int64_t> dispatch_rows;  // like send_counts: the first dispatch row of each run
  std::vector<int64_t> recv_counts;    // rows this rank receives (ExpertExchange::plan)
  std::vector<int64_t> rows;           // chunks * local experts + 1: rows[c * El + e] is the
                                       // first row of chunk c, local expert e at the experts
                                       // (ExpertExchange::plan)
};

// This rank's end of the ep group's exchange (ep = 1, comm null: no communication is ever
// asked of it). The caller sets the group and the options; the exchange adds to the statistics
// and the caller reads and resets them.
struct ExpertExchange {
  comm::Communicator* comm = nullptr;  // null when ep = 1
  int size = 1, rank = 0;
  int64_t local_experts = 0;  // experts each rank holds
  bool active() const { return size > 1; }
  bool bf16 = false;          // rows travel rounded to bf16 (parallel.ep_comm_dtype)
  int chunks = 1;             // parallel.ep_overlap_chunks: the token chunks the caller cuts a
                              // round trip's plan into (at most; EpPlan::chunks is the count)
  Status error;               // the first failed exchange; later ones are skipped
  // Since the caller last reset them: all-to-alls (collectives), bytes sent to other ranks,
  // their time in flight (issue to observed completion, summed) and the time spent inside their
  // calls.
  CommStats stats;

  // The plan of a MoE layer's round trip: the routing's tokens in [tokens.row0, +rows) (all,
  // or with whole experts under tp one tp rank's share) are cut into `chunks` contiguous ranges
  // (at most; plan.chunks is the count) and each range's rows of each (peer, local expert)
  // counted, then plan() exchanges the counts. Because an expert's rows keep their token order,
  // a chunk's rows for an expert are one contiguous run of its dispatch rows. Collective over ep.
  void plan_routing(const ops::MoeRouting& routing, TpChunk tokens, EpPlan& plan);
  // Exchanges plan.send_counts (plan.chunks chunks, local_experts each) over the group into
  // plan.recv_counts and lays out plan.rows. A blocking all-to-all, counted as exposed time
  // (not as an exchange, nor its bytes). After an error the counts received stay zero.
  void plan(EpPlan& plan);
  // Sends `rows` (dispatch order, width floats each) to the ranks holding their experts into
  // `at` (plan.rows' layout), calls compute(c) once chunk c has arrived, which must fill chunk
  // c's rows of `results` (same layout), and sends those back into `back` in dispatch order;
  // `before` (may be empty) runs while the first chunk is in flight.
  void round_trip(const EpPlan& plan, const float* rows, float* at, const float* results,
                  float* back, int64_t width, const std::function<void()>& before,
                  const std::function<void(int)>& compute);
  // Lets the all-to-alls of the round trip in flight progress (a test of each); compute may
  // call it between experts. A failure is returned and kept in `error`.
  Status poll();

  // The all-to-alls of the round trip running now: flight 2c is chunk c's dispatch, 2c + 1 its
  // combine.
  struct Flight {
    comm::Request request;
    double issued = 0;
    bool done = true;
  };
  std::vector<Flight> flights;
  // The wire buffers of a round trip (dispatch send and receive, combine send and receive), in
  // f32 or, under bf16, as bf16 bits; kept so steady state allocates nothing.
  std::vector<float> f32_wire[4];
  std::vector<uint16_t> bf16_wire[4];
};

}  // namespace ms::parallel
