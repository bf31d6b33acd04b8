// Expert parallelism's plan of a MoE layer's round trip (model_impl.h, EpState): which of the
// layer's dispatch rows travel in which chunk. The exchange itself (the count exchange, the
// chunked all-to-alls in f32 or bf16, their statistics) is parallel::ExpertExchange
// (parallel/ep_exchange.h), which EpState is.
//
// The micro-batch's tokens are cut into C contiguous ranges (parallel.ep_overlap_chunks) and
// each range's rows make their round trip as their own pair of all-to-alls. Because an expert's
// rows keep their token order, a chunk's rows for an expert are one contiguous run of its
// dispatch rows.
#include <algorithm>

#include "model/model_impl.h"
#include "parallel/tp_overlap.h"

namespace ms::model {

void Transformer::Impl::ep_plan(MoeActs& m) {
  const int64_t El = ep.local_experts, P = ep.size, n = m.routing.tokens;
  // The tokens whose rows travel: all, or with whole experts under tp this tp rank's share.
  const parallel::TpChunk tokens =
      tp.expert_tokens_split ? parallel::tp_chunk(n, tp.size, tp.rank) : parallel::TpChunk{0, n};
  const int C = parallel::tp_chunk_count(ep.chunks, tokens.rows);
  m.ep.chunks = std::max(C, 1);
  const int64_t Cn = m.ep.chunks;
  const std::vector<int64_t>& offsets = m.routing.offsets;
  const std::vector<int64_t>& token = m.routing.token_of_row;
  m.ep.send_counts.assign(static_cast<size_t>(P * Cn * El), 0);
  m.ep.dispatch_rows.assign(static_cast<size_t>(P * Cn * El), 0);
  // An expert's rows are in token order: walk them once, cutting at the chunks' first tokens.
  for (int64_t j = 0; j < P; ++j) {
    for (int64_t e = 0; e < El; ++e) {
      int64_t row = offsets[static_cast<size_t>(j * El + e)];
      const int64_t end = offsets[static_cast<size_t>(j * El + e + 1)];
      while (row < end && token[static_cast<size_t>(row)] < tokens.row0) ++row;
      for (int64_t c = 0; c < Cn; ++c) {
        const parallel::TpChunk chunk =
            parallel::tp_chunk(tokens.rows, static_cast<int>(Cn), static_cast<int>(c));
        const int64_t first = row;
        const int64_t limit = tokens.row0 + chunk.row0 + chunk.rows;
        while (row < end && token[static_cast<size_t>(row)] < limit) ++row;
        const size_t at = static_cast<size_t>((j * Cn + c) * El + e);
        m.ep.dispatch_rows[at] = first;
        m.ep.send_counts[at] = row - first;
      }
    }
  }
  ep.plan(m.ep);
}

}  // namespace ms::model
