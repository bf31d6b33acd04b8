// The predicted step of a layout; see predict.h.
#include "plan/predict.h"

#include <algorithm>
#include <array>
#include <utility>

#include "model/transformer.h"
#include "parallel/tp_layout.h"
#include "plan/pipeline_replay.h"
#include "train/layer_shape.h"
#include "train/run_checks.h"

namespace ms::plan {
namespace {

using train::LayerShape;
using train::layer_gemms;
using train::layer_shape;

// Bytes of the elementwise passes of one layer's forward (norms, rope, residuals, SwiGLU,
// routing): each float read and written once per pass; the backward moves about twice this.
double layer_elementwise_bytes(const LayerShape& s) {
  const double ffn = s.experts == 0 ? 3.0 * s.N * s.d_ff
                                    : 3.0 * s.expert_rows * s.local_experts * s.d_ff +
                                          4.0 * s.N * s.experts + 3.0 * s.N * s.shared_d_ff;
  return 4.0 * (12.0 * s.Nr * s.D + 4.0 * s.N * (s.heads + s.kv_heads) * s.hd + ffn);
}

// The elements SwiGLU produces in one layer's forward: the dense MLP's, or every local expert's
// routed rows and the shared expert's.
double swiglu_elements(const LayerShape& s) {
  return s.experts == 0 ? static_cast<double>(s.N * s.d_ff)
                        : static_cast<double>(s.expert_rows * s.local_experts * s.d_ff) +
                              static_cast<double>(s.N * s.shared_d_ff);
}

// One layer's elementwise work, forward and backward. Memory traffic at the device's bandwidth,
// except SwiGLU where the profile measured it: its exp per element makes it arithmetic-bound on
// a CPU, several times slower than its 3 floats of traffic per element at STREAM speed.
std::pair<double, double> layer_elementwise_seconds(const CostModel& model, const LayerShape& s) {
  const Device& d = model.cluster().device;
  const double bytes = layer_elementwise_bytes(s);
  if (d.swiglu_forward_ns_per_element <= 0 || d.swiglu_backward_ns_per_element <= 0) {
    const double t = model.elementwise_seconds(bytes);
    return {t, 2 * t};
  }
  const double swiglu = swiglu_elements(s);
  const double rest = model.elementwise_seconds(bytes - 4.0 * 3.0 * swiglu);
  return {rest + model.per_element_seconds(swiglu, d.swiglu_forward_ns_per_element),
          2 * rest + model.per_element_seconds(swiglu, d.swiglu_backward_ns_per_element)};
}

// The whole sequence's attention: under context parallelism a rank computes its T / cp queries
// against every key block of the ring, and the balanced chunks (parallel/cp_layout.h) give each
// rank 1/cp of the causal work, so where the ring was not measured its time is this op's over cp.
AttentionOp attention_op(const LayerShape& s) {
  return {s.B, s.full_T, s.heads, s.kv_heads, s.hd, s.window};
}

// Context parallelism's ring (parallel/ring_attention.cc) where the profile did not run it, per
// layer and micro-batch. Each hop is a p2p of one key/value block, 2 x B x T/cp x kv_heads/tp x
// head_dim f32 values (the trainer sends f32), to the next rank while receiving from the
// previous. Forward: cp - 1 hops, each
// started before the step's block of attention compute (1/cp of the rank's attention) and waited
// for after it, so a hop costs only what exceeds that compute: max(0, hop - block). Backward: the
// key/value block's cp - 1 hops overlap the block's compute the same way, but each of the cp
// dK/dV accumulator hops starts after it and is exposed in full.
struct RingComm {
  double hop_bytes = 0, hop_s = 0;
  double fwd_exposed_s = 0, bwd_exposed_s = 0;
  double bytes = 0, seconds = 0;  // on the wire, forward and backward
};

RingComm ring_comm(const CostModel& model, const LayerShape& s, const Layout& l, double attn_fwd_s,
                   double attn_bwd_s) {
  RingComm out;
  if (l.cp <= 1) return out;
  const double cp = static_cast<double>(l.cp);
  out.hop_bytes = 2.0 * static_cast<double>(s.B * s.T * s.kv_heads * s.hd) * 4.0;
  const bool inter = l.tp * l.cp > model.cluster().ranks_per_node;
  out.hop_s = model.comm_seconds(Collective::kP2P, out.hop_bytes, 2, inter);
  out.fwd_exposed_s = (cp - 1) * std::max(0.0, out.hop_s - attn_fwd_s / cp);
  out.bwd_exposed_s = (cp - 1) * std::max(0.0, out.hop_s - attn_bwd_s / cp) + cp * out.hop_s;
  const double hops = (cp - 1) + (cp - 1) + cp;
  out.bytes = hops * out.hop_bytes * bus_factor(Collective::kP2P, 2);
  out.seconds = hops * out.hop_s;
  return out;
}

// Measured layer / op sum (layer_calibration below), forward and backward.
struct Calibration {
  double fwd = 1, bwd = 1;
};

struct Costs {
  ChunkTimes times;
  Calibration calibration;
  // Per micro-batch, forward and backward.
  double tp_bytes = 0, ep_bytes = 0, tp_seconds = 0, ep_seconds = 0;
  double cp_bytes = 0, cp_seconds = 0;  // the ring's, on the wire
  bool cp_ring_measured = false;        // the ring's time measured at this shape
};

// One micro-batch's collectives inside a layer, forward (backward is the same again):
// tensor parallelism 2 all-reduces of (N, D), or with sequence parallelism 2 all-gathers and
// 2 reduce-scatters; expert parallelism 2 all-to-alls of the routed rows (dispatch, combine).
struct LayerComm {
  double tp_seconds = 0, ep_seconds = 0, tp_bytes = 0, ep_bytes = 0;
  double seconds() const { return tp_seconds + ep_seconds; }
};

LayerComm layer_comm(const CostModel& model, const LayerShape& s, const Layout& l, int bytes,
                     int ep_bytes_per_element) {
  LayerComm out;
  const int rpn = model.cluster().ranks_per_node;
  if (l.tp > 1) {
    const double b = static_cast<double>(s.N * s.D) * bytes;
    const bool inter = l.tp > rpn;
    if (s.sp) {
      out.tp_seconds = 2 * (model.comm_seconds(Collective::kAllGather, b, l.tp, inter) +
                            model.comm_seconds(Collective::kReduceScatter, b, l.tp, inter));
      out.tp_bytes = 4 * b * bus_factor(Collective::kAllGather, l.tp);
    } else {
      out.tp_seconds = 2 * model.comm_seconds(Collective::kAllReduce, b, l.tp, inter);
      out.tp_bytes = 2 * b * bus_factor(Collective::kAllReduce, l.tp);
    }
  }
  if (l.ep > 1 && s.experts > 0) {
    const double b = static_cast<double>(s.N * s.top_k * s.D) * ep_bytes_per_element;
    const bool inter = l.tp * l.ep > rpn;
    // Counts first (a latency-bound all-to-all), then the rows, both ways.
    out.ep_seconds = 2 * (model.comm_seconds(Collective::kAllToAll, 8.0 * l.ep, l.ep, inter) +
                          model.comm_seconds(Collective::kAllToAll, b, l.ep, inter));
    out.ep_bytes = 2 * b * bus_factor(Collective::kAllToAll, l.ep);
  }
  return out;
}

// One layer's compute for one micro-batch, summed over its ops (GEMMs, attention, elementwise
// passes), without collectives: forward, input-gradient and weight-gradient passes. Attention is
// the rank's 1/cp share under context parallelism.
struct LayerCompute {
  double fwd = 0, bwd_input = 0, bwd_weight = 0, attn_fwd = 0, attn_bwd = 0;
};

LayerCompute layer_compute(const CostModel& model, const LayerShape& s, int cp) {
  LayerCompute out;
  for (const auto& [m, n, k] : layer_gemms(s)) {
    out.fwd += model.gemm_seconds(m, n, k);
    out.bwd_input += model.gemm_seconds(m, k, n);   // dX = dY W^T
    out.bwd_weight += model.gemm_seconds(k, n, m);  // dW = X^T dY
  }
  out.attn_fwd = model.attention_seconds(attention_op(s), false) / cp;
  out.attn_bwd = model.attention_seconds(attention_op(s), true) / cp;
  const auto [elem_fwd, elem_bwd] = layer_elementwise_seconds(model, s);
  out.fwd += out.attn_fwd + elem_fwd;
  out.bwd_input += out.attn_bwd + elem_bwd;
  return out;
}

// Whole layers as the trainer runs them against the sum of their ops: where the profile
// measured the model's layer at this micro-batch (layer_key, one rank, no parallelism), its time
// over the op sum of that same shape, forward and backward; 1 where it did not. A layout's op
// sums are scaled by these, so what a layer costs beyond its ops (activations spilling the
// caches between ops, passes the op list leaves out, allocation) carries over to every split of
// it; the split's own shapes still come from its ops.
Calibration layer_calibration(const CostModel& model, const config::RunConfig& c, const Layout& l) {
  Layout whole = l;
  whole.tp = whole.cp = whole.ep = 1;
  whole.sequence_parallel = false;
  const LayerShape s = layer_shape(apply_layout(c, whole));
  const double fwd = model.measured_layer_seconds(s.B, s.T, false);
  const double bwd = model.measured_layer_seconds(s.B, s.T, true);
  if (fwd <= 0 || bwd <= 0) return {};
  const LayerCompute ops = layer_compute(model, s, 1);
  return {fwd / ops.fwd, bwd / (ops.bwd_input + ops.bwd_weight)};
}

Costs chunk_costs(const CostModel& model, const config::RunConfig& c, const Layout& l,
                  int64_t layers, bool first, bool last) {
  const LayerShape s = layer_shape(c);
  const int bytes = model.cluster().bytes_per_element();
  const int ep_bytes = c.parallel.ep_comm_dtype == "bf16" ? 2 : 4;
  const Calibration cal = layer_calibration(model, c, l);
  const LayerCompute ops = layer_compute(model, s, l.cp);
  double attn_fwd = ops.attn_fwd * cal.fwd, attn_bwd = ops.attn_bwd * cal.bwd;
  RingComm ring = ring_comm(model, s, l, attn_fwd, attn_bwd);
  const LayerComm comm = layer_comm(model, s, l, bytes, ep_bytes);
  double fwd = ops.fwd * cal.fwd + ring.fwd_exposed_s + comm.seconds();
  double bwd_input = ops.bwd_input * cal.bwd + ring.bwd_exposed_s + comm.seconds();
  Costs out;
  if (l.cp > 1) {
    // Where the profile ran the ring at this shape, its time replaces the attention's 1/cp share
    // and the modelled hops: it holds what they leave out (the balanced chunks' partial blocks,
    // the per-block calls and merges, the waits for hops as this machine schedules them).
    const double ring_fwd = model.measured_cp_attention_seconds(attention_op(s), l.cp, false);
    const double ring_bwd = model.measured_cp_attention_seconds(attention_op(s), l.cp, true);
    if (ring_fwd > 0 && ring_bwd > 0) {
      fwd += ring_fwd - attn_fwd - ring.fwd_exposed_s;
      bwd_input += ring_bwd - attn_bwd - ring.bwd_exposed_s;
      attn_fwd = ring_fwd;
      attn_bwd = ring_bwd;
      ring.fwd_exposed_s = ring.bwd_exposed_s = 0;
      out.cp_ring_measured = true;
    }
  }
  const double bwd_weight = ops.bwd_weight * cal.bwd;
  // Recomputing the attention reruns its forward ring too.
  if (l.recompute == config::Recompute::kFull) bwd_input += fwd;
  if (l.recompute == config::Recompute::kSelective) bwd_input += attn_fwd + ring.fwd_exposed_s;
  out.calibration = cal;
  out.times = {fwd * layers, bwd_input * layers, bwd_weight * layers};
  out.tp_bytes = 2 * comm.tp_bytes * layers;
  out.ep_bytes = 2 * comm.ep_bytes * layers;
  out.tp_seconds = 2 * comm.tp_seconds * layers;
  out.ep_seconds = 2 * comm.ep_seconds * layers;
  out.cp_bytes = ring.bytes * static_cast<double>(layers);
  out.cp_seconds = ring.seconds * static_cast<double>(layers);
  if (first) {
    const double embed = model.elementwise_seconds(4.0 * 2 * s.Nr * s.D);
    out.times.forward += embed;
    out.times.backward_weight += embed;
  }
  if (last) {
    // lm_head, the loss's softmax over the rank's vocabulary slice, the final norm.
    out.times.forward += model.gemm_seconds(s.N, s.vocab, s.D) +
                         model.elementwise_seconds(4.0 * (3.0 * s.N * s.vocab + 4.0 * s.Nr * s.D));
    out.times.backward_input +=
        model.gemm_seconds(s.N, s.D, s.vocab) +
        model.elementwise_seconds(4.0 * (2.0 * s.N * s.vocab + 8.0 * s.Nr * s.D));
    out.times.backward_weight += model.gemm_seconds(s.D, s.vocab, s.N);
    if (s.sp) {
      const double b = static_cast<double>(s.N * s.D) * bytes;
      const double t = model.comm_seconds(Collective::kAllGather, b, l.tp,
                                          l.tp > model.cluster().ranks_per_node);
      out.times.forward += t;
      out.times.backward_input += t;
      out.tp_bytes += 2 * b * bus_factor(Collective::kAllGather, l.tp);
      out.tp_seconds += 2 * t;
    }
  }
  return out;
}

// The dp reduction of one pipeline rank's gradients: ZeRO-1 reduce-scatters the gradients and
// all-gathers the updated parameters, else one all-reduce. Dense weights over dp x cp (the
// trainer's dp_cp group: every cp rank holds a share of the tokens), routed experts over the
// expert-data-parallel group (dp x cp / ep).
AxisTraffic dp_traffic(const CostModel& model, const Layout& l, const RankElements& e, int bytes) {
  AxisTraffic out;
  const bool inter = l.tp * l.cp * l.dp > model.cluster().ranks_per_node;
  auto reduce = [&](int64_t elements, int n) {
    const double grads = static_cast<double>(elements) * 4.0;
    const double params = static_cast<double>(elements) * bytes;
    if (l.zero) {
      out.seconds += model.comm_seconds(Collective::kReduceScatter, grads, n, inter) +
                     model.comm_seconds(Collective::kAllGather, params, n, inter);
      out.bytes += (grads + params) * bus_factor(Collective::kReduceScatter, n);
    } else {
      out.seconds += model.comm_seconds(Collective::kAllReduce, grads, n, inter);
      out.bytes += grads * bus_factor(Collective::kAllReduce, n);
    }
  };
  reduce(e.dense, l.dp * l.cp);
  reduce(e.expert, std::max(1, l.dp * l.cp / l.ep));
  return out;
}

// The dp reduction's step time from the profile's measured cost (DpReductionCost): each
// gradient MiB the rank reduces at the measured cost of the trainer's collective, scaled from
// the measured group to this one by the collective's bus factor; ZeRO-1's all-gather of the
// updated parameters (blocking, after the update) from the link model.
double measured_dp_seconds(const CostModel& model, const DpReductionCost& cost, const Layout& l,
                           const RankElements& e, int bytes) {
  const bool inter = l.tp * l.cp * l.dp > model.cluster().ranks_per_node;
  const Collective op = l.zero ? Collective::kReduceScatter : Collective::kAllReduce;
  const double per_mib = l.zero ? cost.reduce_scatter_s_per_mib : cost.allreduce_s_per_mib;
  const double measured_factor = bus_factor(op, cost.ranks);
  double seconds = 0;
  auto reduce = [&](int64_t elements, int n) {
    if (n <= 1) return;
    const double mib = static_cast<double>(elements) * 4.0 / (1 << 20);
    seconds += mib * per_mib * (measured_factor > 0 ? bus_factor(op, n) / measured_factor : 1);
    if (l.zero) {
      seconds += model.comm_seconds(Collective::kAllGather, static_cast<double>(elements) * bytes,
                                    n, inter);
    }
  };
  reduce(e.dense, l.dp * l.cp);
  reduce(e.expert, std::max(1, l.dp * l.cp / l.ep));
  return seconds;
}

// The update: AdamW reads and writes parameter, gradient and both moments of the elements the
// rank updates (its ZeRO-1 shard), plus zeroing and the norm over every local gradient. Where
// the profile timed the trainer's AdamW (device.adamw_ns_per_element), the update takes that
// per element: its sqrt and division per element, not the memory traffic, bound it on a CPU.
double optimizer_seconds(const CostModel& model, const Layout& l, const RankElements& e) {
  const double local = static_cast<double>(e.dense + e.expert);
  const int dpc = l.dp * l.cp;
  const double updated = l.zero ? static_cast<double>(e.dense) / dpc +
                                      static_cast<double>(e.expert) / std::max(1, dpc / l.ep)
                                : local;
  const double ns = model.cluster().device.adamw_ns_per_element;
  const double update =
      ns > 0 ? model.per_element_seconds(updated, ns) : model.elementwise_seconds(28.0 * updated);
  return model.elementwise_seconds(8.0 * local) + update;
}

}  // namespace

Result<Prediction> predict(const CostModel& model, const config::RunConfig& config, const Layout& l,
                           const std::vector<RankElements>& elements, int world) {
  const config::RunConfig c = apply_layout(config, l);
  MS_ASSIGN_OR_RETURN(const train::PipelineLayout pipeline, train::check_pipeline(c, l.dp));
  const Cluster& cluster = model.cluster();
  const int bytes = cluster.bytes_per_element();
  Prediction p;
  p.layout = l;
  const size_t stages = pipeline.stages.size();
  std::vector<std::vector<ChunkTimes>> chunks(static_cast<size_t>(l.pp));
  const int64_t m = pipeline.schedule.micro_batches;
  for (size_t st = 0; st < stages; ++st) {
    const Costs costs =
        chunk_costs(model, c, l, pipeline.stages[st].count, st == 0, st + 1 == stages);
    chunks[st % static_cast<size_t>(l.pp)].push_back(costs.times);
    if (st == 0) {
      p.cp_ring_measured = costs.cp_ring_measured;
      p.layer_calibration_fwd = costs.calibration.fwd;
      p.layer_calibration_bwd = costs.calibration.bwd;
    }
    if (st % static_cast<size_t>(l.pp) == 0) {
      p.forward_s += costs.times.forward * static_cast<double>(m);
      p.backward_s +=
          (costs.times.backward_input + costs.times.backward_weight) * static_cast<double>(m);
      p.tp.bytes += costs.tp_bytes * static_cast<double>(m);
      p.ep.bytes += costs.ep_bytes * static_cast<double>(m);
      p.tp.seconds += costs.tp_seconds * static_cast<double>(m);
      p.ep.seconds += costs.ep_seconds * static_cast<double>(m);
      p.cp.bytes += costs.cp_bytes * static_cast<double>(m);
      p.cp.seconds += costs.cp_seconds * static_cast<double>(m);
    }
  }
  const LayerShape s = layer_shape(c);
  const double act_bytes = static_cast<double>(s.Nr * s.D) * bytes;
  const bool pp_inter =
      l.tp * l.cp * l.dp >= cluster.ranks_per_node && l.pp > 1 && world > cluster.ranks_per_node;
  const double p2p = l.pp > 1 ? model.comm_seconds(Collective::kP2P, act_bytes, 2, pp_inter) : 0;
  MS_ASSIGN_OR_RETURN(const ReplayResult replay, replay_pipeline(pipeline.schedule, chunks, p2p));
  p.compute_s = replay.makespan;
  p.bubble = l.pp > 1 ? replay.bubble : 0;
  if (l.pp > 1) {
    // Rank 0 sends each micro-batch's activation out of every chunk but the last stage's and
    // the gradient out of every chunk but stage 0's: 2 vpp - 1 messages for vpp chunks.
    p.pp.bytes = act_bytes * static_cast<double>(m) * (2.0 * l.vpp - 1);
    p.pp.seconds = p2p * static_cast<double>(m) * (2.0 * l.vpp - 1);
  }
  MS_ASSIGN_OR_RETURN(p.memory,
                      rank_memory(config, l, elements, bytes, cluster.runtime_overhead_mib));
  p.peak = peak_rank(p.memory);
  double dp_seconds = 0, opt_seconds = 0, measured_dp = 0;
  const std::optional<DpReductionCost> dp_cost = model.dp_reduction_cost();
  for (const RankElements& e : elements) {
    const AxisTraffic t = dp_traffic(model, l, e, bytes);
    if (t.seconds >= dp_seconds) p.dp = t;
    dp_seconds = std::max(dp_seconds, t.seconds);
    opt_seconds = std::max(opt_seconds, optimizer_seconds(model, l, e));
    if (dp_cost) measured_dp = std::max(measured_dp, measured_dp_seconds(model, *dp_cost, l, e, bytes));
  }
  // Measured: what the trainer's reduction added to a step on the profiled machine, whether
  // hidden or not. Else overlap_dp: all of it that the last backward lasts.
  if (dp_cost && l.dp * l.cp > 1) {
    p.dp_exposed_s = measured_dp;
    p.dp_overlap_measured = true;
  } else {
    p.dp_exposed_s =
        cluster.overlap_dp ? std::max(0.0, dp_seconds - replay.last_backward) : dp_seconds;
  }
  p.optimizer_s = opt_seconds;
  p.step_s = p.compute_s + p.dp_exposed_s + p.optimizer_s + cluster.step_overhead_ms * 1e-3;
  p.band_s = p.step_s * cluster.profile.spread;
  p.disturbed_profile = cluster.disturbed();
  const double tokens = static_cast<double>(c.train.global_batch * c.train.seq_len);
  p.tokens_per_s = tokens / p.step_s;
  const double peak = cluster.peak_flops() * model.compute_share() * world;
  p.mfu = tokens * model::training_flops_per_token(c.model, c.train.seq_len) / p.step_s / peak;
  return p;
}

}  // namespace ms::plan
