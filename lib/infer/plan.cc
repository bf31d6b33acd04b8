// Cost measurement on the real model and the deployment search of infer/plan.h.
#include "infer/plan.h"

#include <algorithm>
#include <limits>

#include "core/timer.h"
#include "infer/kv_cache.h"
#include "infer/sampler.h"

namespace ms::infer {

double CostCurve::operator()(double size) const {
  if (at.empty()) return 0;
  if (at.size() == 1) return seconds[0] * size / std::max(at[0], 1e-12);
  size_t hi = 1;
  while (hi + 1 < at.size() && at[hi] < size) ++hi;
  const double x0 = at[hi - 1], x1 = at[hi], y0 = seconds[hi - 1], y1 = seconds[hi];
  const double y = y0 + (y1 - y0) * (size - x0) / std::max(x1 - x0, 1e-12);
  return std::max(y, 0.0);
}

namespace {

// Timings of one decode step of b tokens through the staged forward, split by side.
struct StepTimes {
  double attention = 0, experts = 0, head = 0;
};

Result<StepTimes> time_decode_step(model::Transformer& model, int64_t b, int64_t context) {
  const config::ModelConfig& c = model.config();
  constexpr int64_t kBlock = 16;
  KvCache cache(c, b * ((context + kBlock) / kBlock + 1), kBlock);
  std::vector<std::vector<int32_t>> tables;
  for (int64_t i = 0; i < b; ++i) tables.push_back(*cache.allocator().allocate(cache.blocks_for(context + 1)));
  const std::vector<int32_t> token = {1};
  std::vector<model::CachedChunk> chunks;
  for (int64_t i = 0; i < b; ++i) chunks.push_back({token, context, tables[static_cast<size_t>(i)]});
  StepTimes t;
  Stopwatch w;
  MS_ASSIGN_OR_RETURN(model::CachedPass pass, model.begin_cached(chunks, cache.view()));
  t.head += w.elapsed_s();
  std::vector<float> out;
  for (;;) {
    w.reset();
    model.run_to_experts(pass);
    t.attention += w.elapsed_s();
    if (pass.finished()) break;
    out.resize(pass.dispatch_rows().size());
    w.reset();
    MS_RETURN_IF_ERROR(model.run_experts(pass.layer(), pass.dispatch_offsets(),
                                         pass.dispatch_rows().data(), out.data()));
    t.experts += w.elapsed_s();
    w.reset();
    MS_RETURN_IF_ERROR(model.apply_experts(pass, out));
    t.attention += w.elapsed_s();
  }
  w.reset();
  MS_ASSIGN_OR_RETURN(Tensor logits, model.cached_logits(pass));
  for (int64_t i = 0; i < b; ++i) argmax(logits.data<float>() + i * c.vocab_size, c.vocab_size);
  t.head += w.elapsed_s();
  return t;
}

// Seconds for one expert of layer 0 over n rows.
Result<double> time_expert(model::Transformer& model, int64_t n) {
  const config::ModelConfig& c = model.config();
  std::vector<int64_t> offsets(static_cast<size_t>(c.moe.num_experts + 1), n);
  offsets[0] = 0;
  std::vector<float> x(static_cast<size_t>(n * c.d_model), 0.01f), y(x.size());
  const Stopwatch w;
  MS_RETURN_IF_ERROR(model.run_experts(0, offsets, x.data(), y.data()));
  return w.elapsed_s();
}

double period(double ta, double te, double tc, int m) {
  return std::max({m * ta, m * te, ta + te + 2 * tc});
}

}  // namespace

Result<ServingCosts> measure_serving_costs(model::Transformer& model, int64_t context,
                                           const std::vector<int64_t>& batch_sizes,
                                           const std::vector<int64_t>& expert_rows,
                                           int repeats) {
  const config::ModelConfig& c = model.config();
  if (c.moe.num_experts == 0) {
    return InvalidArgument("planning disaggregated serving needs a MoE model");
  }
  if (context < 0 || context + 1 > c.max_seq_len) {
    return InvalidArgument("--context " + std::to_string(context) + " must leave room for a " +
                           "decode token within max_seq_len " + std::to_string(c.max_seq_len));
  }
  ServingCosts costs;
  costs.layers = c.n_layers;
  costs.num_experts = c.moe.num_experts;
  costs.top_k = c.moe.top_k;
  costs.d_model = c.d_model;
  costs.context = context;
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t b : batch_sizes) {
    StepTimes best{inf, inf, inf};
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      MS_ASSIGN_OR_RETURN(StepTimes t, time_decode_step(model, b, context));
      best = {std::min(best.attention, t.attention), std::min(best.experts, t.experts),
              std::min(best.head, t.head)};
    }
    costs.attention.at.push_back(static_cast<double>(b));
    costs.attention.seconds.push_back(best.attention / static_cast<double>(c.n_layers));
    costs.head.at.push_back(static_cast<double>(b));
    costs.head.seconds.push_back(best.head);
  }
  for (int64_t n : expert_rows) {
    double best = inf;
    for (int r = 0; r < std::max(repeats, 1); ++r) {
      MS_ASSIGN_OR_RETURN(double t, time_expert(model, n));
      best = std::min(best, t);
    }
    costs.expert.at.push_back(static_cast<double>(n));
    costs.expert.seconds.push_back(best);
  }
  return costs;
}

namespace {

// Seconds of `rounds` round trips of `bytes` between ranks 0 and 1 (rank 0's clock).
Result<double> ping_pong(comm::Communicator& comm, std::vector<uint8_t>& buf, int rounds) {
  const int rank = comm.rank();
  constexpr int kTag = 7301;
  const Stopwatch w;
  for (int i = 0; i < rounds; ++i) {
    if (rank == 0) {
      MS_RETURN_IF_ERROR(comm.send(buf.data(), buf.size(), DType::kU8, 1, kTag));
      MS_RETURN_IF_ERROR(comm.recv(buf.data(), buf.size(), DType::kU8, 1, kTag));
    } else if (rank == 1) {
      MS_RETURN_IF_ERROR(comm.recv(buf.data(), buf.size(), DType::kU8, 0, kTag));
      MS_RETURN_IF_ERROR(comm.send(buf.data(), buf.size(), DType::kU8, 0, kTag));
    }
  }
  return w.elapsed_s();
}

}  // namespace

Status measure_link(comm::Communicator& comm, ServingCosts& costs) {
  if (comm.size() < 2) return InvalidArgument("measuring the link needs two ranks");
  std::vector<uint8_t> small(8), large(4u << 20);
  MS_RETURN_IF_ERROR(ping_pong(comm, small, 10).status());  // warm-up
  MS_ASSIGN_OR_RETURN(const double t_small, ping_pong(comm, small, 200));
  MS_RETURN_IF_ERROR(ping_pong(comm, large, 2).status());
  MS_ASSIGN_OR_RETURN(const double t_large, ping_pong(comm, large, 10));
  std::vector<int64_t> ns = {static_cast<int64_t>(t_small / 400 * 1e9),
                             static_cast<int64_t>(t_large / 20 * 1e9)};
  MS_RETURN_IF_ERROR(comm.broadcast(ns.data(), ns.size(), DType::kI64, 0));
  costs.link_latency_s = static_cast<double>(ns[0]) * 1e-9;
  const double transfer = std::max(static_cast<double>(ns[1] - ns[0]) * 1e-9, 1e-9);
  costs.link_bytes_per_s = static_cast<double>(large.size()) / transfer;
  costs.link_source = "measured between ranks 0 and 1";
  return Status::OK();
}

PlanRow evaluate_plan(const ServingCosts& c, int attention, int experts, int micro_batches,
                      int64_t micro_batch) {
  PlanRow row{attention, experts, micro_batches, micro_batch};
  const double b = static_cast<double>(micro_batch), E = static_cast<double>(c.num_experts);
  const double rows_per_expert = attention * b * static_cast<double>(c.top_k) / E;
  row.ta = c.attention(b);
  row.te = E / experts * c.expert(rows_per_expert);
  const double row_bytes = 4.0 * static_cast<double>(c.d_model);
  const double sent = b * static_cast<double>(c.top_k) * row_bytes;  // by one attention rank
  const double received = attention * sent / experts;                // by one expert rank
  row.tc = c.link_latency_s + std::max(sent, received) / c.link_bytes_per_s;
  row.tpot_s = static_cast<double>(c.layers) * period(row.ta, row.te, row.tc, micro_batches) +
               c.head(micro_batches * b);
  row.tokens_per_s = attention * micro_batches * b / row.tpot_s;
  row.m_needed = (row.ta + row.te + 2 * row.tc) / std::max({row.ta, row.te, 1e-12});
  return row;
}

std::vector<PlanRow> search_plans(const ServingCosts& c, int ranks, double tpot_target_s,
                                  int max_micro, const std::vector<int64_t>& micro_batch_sizes) {
  std::vector<PlanRow> rows;
  for (int a = 1; a < ranks; ++a) {
    const int r = ranks - a;
    if (r > c.num_experts) continue;
    for (int m = 1; m <= max_micro; ++m) {
      for (int64_t b : micro_batch_sizes) {
        const PlanRow row = evaluate_plan(c, a, r, m, b);
        if (row.tpot_s <= tpot_target_s) rows.push_back(row);
      }
    }
  }
  std::sort(rows.begin(), rows.end(), [](const PlanRow& x, const PlanRow& y) {
    return x.tokens_per_s > y.tokens_per_s;
  });
  return rows;
}

PlanRow colocated_plan(const ServingCosts& c, int ranks, int64_t batch) {
  PlanRow row{ranks, 0, 1, batch};
  const double b = static_cast<double>(batch), E = static_cast<double>(c.num_experts);
  row.ta = c.attention(b);
  row.te = E * c.expert(b * static_cast<double>(c.top_k) / E);
  row.tpot_s = static_cast<double>(c.layers) * (row.ta + row.te) + c.head(b);
  row.tokens_per_s = ranks * b / row.tpot_s;
  row.m_needed = 1;
  return row;
}

}  // namespace ms::infer
