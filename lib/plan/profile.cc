// Measuring a cluster file on this machine; see profile.h.
#include "plan/profile.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "core/memory_bandwidth.h"
#include "core/timer.h"
#include "model/transformer.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "plan/op_costs.h"
#include "plan/profile_cp.h"
#include "plan/profile_overlap.h"
#include "plan/profile_timer.h"
#include "plan/search.h"
#include "train/optimizer.h"

namespace ms::plan {
namespace {

// A fixed-length timing outside the timer's bookkeeping (the links' and the concurrency
// probe's work, which every rank runs at once).
double time_op(const std::function<void()>& op, double min_seconds) {
  return lower_quartile(sample_calls(op, min_seconds));
}

// One sgemm call of (m, n, k) on buffers it owns.
std::function<void()> gemm_op(int64_t m, int64_t n, int64_t k) {
  auto a = std::make_shared<std::vector<float>>(static_cast<size_t>(m * k), 0.01f);
  auto b = std::make_shared<std::vector<float>>(static_cast<size_t>(k * n), 0.02f);
  auto c = std::make_shared<std::vector<float>>(static_cast<size_t>(m * n), 0.0f);
  return [=] {
    ops::sgemm(ops::Transpose::kNo, ops::Transpose::kNo, m, n, k, 1.0f, a->data(), k, b->data(), n,
               0.0f, c->data(), n);
  };
}

double gemm_time(int64_t m, int64_t n, int64_t k, ProfileTimer& timer) {
  return timer.time(gemm_op(m, n, k));
}

double gemm_time(int64_t m, int64_t n, int64_t k, double min_seconds) {
  return time_op(gemm_op(m, n, k), min_seconds);
}

// Per-element kernels of the trainer that are arithmetic-bound, in ns per element: SwiGLU forward
// and backward over 1 Mi elements (4 MiB per array, the size of a layer's activations), and the
// AdamW update over one segment of 4 Mi elements, whose four arrays (parameter, gradient, two
// moments; 64 MiB) overflow the last-level cache as a model's optimizer state does: at 1 Mi
// elements (16 MiB) they stayed in this machine's 32 MiB L3 and timed the update faster than
// training ran it. (At 8 Mi elements this VM ran the same loop 2-4x slower per element in some
// processes, so the probe stays at the smallest size past the cache.)
constexpr int64_t kElementwiseProbe = int64_t{1} << 20;
constexpr int64_t kOptimizerProbe = int64_t{4} << 20;

Result<double> adamw_ns(ProfileTimer& timer) {
  const int64_t n = kOptimizerProbe;
  MS_ASSIGN_OR_RETURN(std::unique_ptr<train::Optimizer> opt,
                      train::Optimizer::create(config::OptimConfig{}, n, 1));
  std::vector<float> w(static_cast<size_t>(n), 0.5f), g(static_cast<size_t>(n), 0.01f);
  const train::OptimSegment seg{.param = 0, .offset = 0, .length = n, .weight_decay = true};
  Status status = Status::OK();
  const double s = timer.time([&] {
    Status st = opt->step(w, g, std::span<const train::OptimSegment>(&seg, 1),
                          train::OptimStep{.lr = 1e-4, .grad_scale = 1.0},
                          [](std::span<double>) { return Status::OK(); });
    if (!st.ok()) status = st;
  });
  MS_RETURN_IF_ERROR(status);
  return s / static_cast<double>(n) * 1e9;
}

std::pair<double, double> swiglu_ns(ProfileTimer& timer) {
  const size_t n = static_cast<size_t>(kElementwiseProbe);
  std::vector<float> gate(n, 0.3f), up(n, 0.7f), out(n), dout(n, 0.1f), dgate(n), dup(n);
  const double f = timer.time(
      [&] { ops::swiglu_forward(gate.data(), up.data(), out.data(), kElementwiseProbe); });
  const double b = timer.time([&] {
    ops::swiglu_backward(gate.data(), up.data(), dout.data(), dgate.data(), dup.data(),
                         kElementwiseProbe);
  });
  return {f / static_cast<double>(n) * 1e9, b / static_cast<double>(n) * 1e9};
}

double attention_time(const AttentionOp& op, bool backward, ProfileTimer& timer) {
  ops::AttentionShape s{.batch = op.batch,
                        .seq = op.seq,
                        .heads = op.heads,
                        .kv_heads = op.kv_heads,
                        .head_dim = op.head_dim,
                        .window = op.window,
                        .block = 64};
  const size_t q = static_cast<size_t>(op.batch * op.seq * op.heads * op.head_dim);
  const size_t kv = static_cast<size_t>(op.batch * op.seq * op.kv_heads * op.head_dim);
  std::vector<float> Q(q, 0.01f), K(kv, 0.02f), V(kv, 0.03f), O(q),
      lse(q / static_cast<size_t>(op.head_dim)), dO(q, 0.01f), dQ(q), dK(kv), dV(kv);
  ops::attention_forward(s, Q.data(), K.data(), V.data(), O.data(), lse.data());
  if (!backward) {
    return timer.time(
        [&] { ops::attention_forward(s, Q.data(), K.data(), V.data(), O.data(), lse.data()); });
  }
  return timer.time([&] {
    ops::attention_backward(s, Q.data(), K.data(), V.data(), O.data(), lse.data(), dO.data(),
                            dQ.data(), dK.data(), dV.data());
  });
}

// The run's model as the trainer runs it, on one rank without parallelism: the first pipeline
// chunk (the embedding, no output layer) of min(n_layers, kLayerProbeLayers) layers, a
// micro-batch of `batch` sequences of `seq` tokens. Its forward and its backward (input and
// weight gradients), each the lower quartile over at least 5 calls and the timer's seconds, per
// layer; the embedding's lookup and scatter are a few hundredths of a layer. Several layers, so
// that what one layer leaves in the caches for the next is as in training, where the backward
// reads activations every layer stored; embedded tokens rather than made-up activations,
// because a MoE layer's cost follows its routing, which follows its inputs (made-up inputs
// routed so that the layer ran 1.4x faster than in training).
constexpr int64_t kLayerProbeLayers = 4;

Result<std::pair<double, double>> layer_times(const config::ModelConfig& config, int64_t batch,
                                              int64_t seq, ProfileTimer& timer) {
  config::ModelConfig c = config;
  c.max_seq_len = std::max(c.max_seq_len, seq);
  const int64_t layers = std::min(c.n_layers, kLayerProbeLayers);
  model::ModelParallel parallel;
  parallel.chunk = {.first_layer = 0, .layers = layers, .first = true, .last = false};
  MS_ASSIGN_OR_RETURN(std::unique_ptr<model::Transformer> m,
                      model::Transformer::create(c, /*seed=*/1, parallel));
  std::vector<int32_t> tokens(static_cast<size_t>(batch * seq));
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7919) % static_cast<size_t>(c.vocab_size));
  }
  const size_t n = static_cast<size_t>(m->stage_activation_elements(batch, seq));
  std::vector<float> input(n), output(n), grad_out(n), grad_in(n);
  for (size_t i = 0; i < n; ++i) {
    input[i] = 0.5f * static_cast<float>((i * 2654435761u) % 1000) / 1000.0f - 0.25f;
    grad_out[i] = 1e-3f * static_cast<float>((i * 40503u) % 1000) / 1000.0f;
  }
  const model::StageBatch mb{.inputs = tokens.data(), .targets = tokens.data(), .B = batch,
                             .T = seq, .grad_scale = 1.0f, .backward = true};
  MS_ASSIGN_OR_RETURN(
      const std::vector<double> quartiles,
      timer.time_sets([&]() -> Result<std::vector<std::vector<double>>> {
        std::vector<double> fwd, bwd;
        double total = 0;
        for (int call = 0; call < 6 || total < timer.min_seconds(); ++call) {
          Stopwatch watch;
          MS_RETURN_IF_ERROR(m->stage_forward(0, mb, input, output).status());
          const double f = watch.elapsed_s();
          watch.reset();
          MS_RETURN_IF_ERROR(m->stage_backward(0, grad_out, grad_in));
          const double b = watch.elapsed_s();
          if (call == 0) continue;  // warm: page faults, BLAS buffers
          fwd.push_back(f / static_cast<double>(layers));
          bwd.push_back(b / static_cast<double>(layers));
          total += f + b;
        }
        return std::vector<std::vector<double>>{fwd, bwd};
      }));
  return std::pair{quartiles[0], quartiles[1]};
}

// Times the op a measured-op key names, into `out` under that key (a layer key: the layer's
// forward and backward, both keys).
Status time_key(const std::string& key, const ProfileOptions& options, ProfileTimer& timer,
                MeasuredOps& out) {
  long long v[6] = {0, 0, 0, 0, 0, 0};
  if (key.rfind("gemm ", 0) == 0 &&
      std::sscanf(key.c_str() + 5, "%lldx%lldx%lld", &v[0], &v[1], &v[2]) == 3) {
    out[key] = gemm_time(v[0], v[1], v[2], timer);
    return Status::OK();
  }
  const bool bwd = key.rfind("attn_bwd ", 0) == 0;
  if ((bwd || key.rfind("attn_fwd ", 0) == 0) &&
      std::sscanf(key.c_str() + 9, "%lldx%lldx%lldx%lldx%lldx%lld", &v[0], &v[1], &v[2], &v[3],
                  &v[4], &v[5]) == 6) {
    out[key] = attention_time({v[0], v[1], v[2], v[3], v[4], v[5]}, bwd, timer);
    return Status::OK();
  }
  if ((key.rfind("layer_fwd ", 0) == 0 || key.rfind("layer_bwd ", 0) == 0) &&
      std::sscanf(key.c_str() + 10, "%lldx%lld", &v[0], &v[1]) == 2 && options.config != nullptr) {
    MS_ASSIGN_OR_RETURN(const auto times,
                        layer_times(options.config->model, v[0], v[1], timer));
    out[layer_key(v[0], v[1], false)] = times.first;
    out[layer_key(v[0], v[1], true)] = times.second;
    return Status::OK();
  }
  return InvalidArgument("profile: unknown op key '" + key + "'");
}

double resident_mib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  }
  return 0;
}

double node_memory_gib() {
  const double pages = static_cast<double>(sysconf(_SC_PHYS_PAGES));
  return pages * static_cast<double>(sysconf(_SC_PAGE_SIZE)) / (1024.0 * 1024.0 * 1024.0);
}

// The node's cores, not this rank's affinity mask (mpirun binds each rank to one core).
int node_cores() { return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

// Every GEMM and attention shape the search looks up for the config on 1 to plan_ranks ranks.
Result<std::set<std::string>> op_keys(const ProfileOptions& options) {
  std::set<std::string> keys;
  Cluster any;
  any.devices_per_node = 1;
  any.device.peak_tflops["f32"] = 1;
  any.device.memory_bandwidth_gbs = 1;
  any.intra_node = any.inter_node = {1, 1};
  any.ranks_per_node = 1;
  CostModel recorder(any, 1);
  recorder.record_ops(&keys);
  for (int w = 1; w <= options.plan_ranks; ++w) {
    for (const Layout& l : candidate_layouts(*options.config, w)) {
      MS_ASSIGN_OR_RETURN(const std::vector<RankElements> e, rank_elements(*options.config, l));
      MS_RETURN_IF_ERROR(predict(recorder, *options.config, l, e, w).status());
    }
  }
  return keys;
}

bool is_cp_key(const std::string& key) { return key.rfind("cp_", 0) == 0; }

// Runs `work` on ranks [0, count) while the others sleep; see below.
Status on_ranks_alone(comm::Communicator& world, int count, const std::function<Status()>& work);

// The ring attention of every context-parallel shape the search looks up, on a cp group of the
// profile's first cp ranks while the others sleep (a cp wider than the profile's world stays
// modelled); rank 0's times into the measured ops.
Status measure_cp_rings(comm::Communicator& world, const ProfileOptions& options, Cluster& c) {
  MS_ASSIGN_OR_RETURN(const std::set<std::string> keys, op_keys(options));
  std::map<int, std::unique_ptr<comm::Communicator>> groups;
  for (const std::string& key : keys) {
    AttentionOp op;
    int cp = 0;
    bool backward = false;
    if (!parse_cp_attention_key(key, op, cp, backward) || backward) continue;  // fwd and bwd
    if (cp > world.size()) continue;
    if (groups.count(cp) == 0) {
      MS_ASSIGN_OR_RETURN(groups[cp],
                          world.split(world.rank() < cp ? 0 : comm::Communicator::kNoColor,
                                      world.rank(), "profile-cp" + std::to_string(cp)));
    }
    std::pair<double, double> times;
    MS_RETURN_IF_ERROR(on_ranks_alone(world, cp, [&]() -> Status {
      MS_ASSIGN_OR_RETURN(times, cp_attention_times(*groups[cp], op, options.min_seconds_per_op));
      return Status::OK();
    }));
    c.device.measured[cp_attention_key(op, cp, false)] = times.first;
    c.device.measured[cp_attention_key(op, cp, true)] = times.second;
  }
  return Status::OK();
}

// Every rank times every op shape at once; rank 0's times.
Status measure_concurrent_ops(comm::Communicator& world, const ProfileOptions& options,
                              Cluster& c) {
  MS_ASSIGN_OR_RETURN(const std::set<std::string> keys, op_keys(options));
  MeasuredOps measured;
  // Not metered: these ranks load each other, and a repeat on one would leave the rest behind.
  ProfileTimer timer(options.min_seconds_per_op, nullptr);
  for (const std::string& key : keys) {
    if (measured.count(key) != 0) continue;  // a layer's backward, timed with its forward
    if (is_cp_key(key)) continue;            // measure_cp_rings: on a cp group
    MS_RETURN_IF_ERROR(world.barrier());
    MS_RETURN_IF_ERROR(time_key(key, options, timer, measured));
  }
  if (world.rank() == 0) c.device.measured_concurrent = std::move(measured);
  return Status::OK();
}

// The compute side of the profile, on rank 0 alone.
Status measure_device(const ProfileOptions& options, Cluster& c) {
  Device& d = c.device;
  ProfileTimer timer(options.min_seconds_per_op);
  d.name = options.name + " (one core, OpenBLAS sgemm, measured by ms-train plan --profile)";
  d.dtype = "f32";
  for (int64_t n : {32, 64, 128, 256, 512, 1024}) {
    const double s = gemm_time(n, n, n, timer);
    const double flops = 2.0 * static_cast<double>(n * n * n);
    d.gemm.points.emplace_back(flops / 1e9, flops / s / 1e9);
  }
  double peak = 0;
  for (const auto& [f, rate] : d.gemm.points) peak = std::max(peak, rate);
  d.peak_tflops["f32"] = peak / 1e3;
  d.gemm.max = 1.0;
  d.memory_bandwidth_gbs = measure_stream_gbs(StreamKernel::kTriad, size_t{8} << 20, 5);
  MS_ASSIGN_OR_RETURN(d.adamw_ns_per_element, adamw_ns(timer));
  std::tie(d.swiglu_forward_ns_per_element, d.swiglu_backward_ns_per_element) =
      swiglu_ns(timer);
  // Attention's rate against a GEMM of the same FLOPs, at a mid-sized shape.
  const CostModel model(c, 1);
  const AttentionOp probe{4, 256, 8, 8, 64, 0};
  const double flops = attention_flops(probe, false);
  d.attention_efficiency =
      flops / attention_time(probe, false, timer) / model.curve_rate(flops);
  if (options.config != nullptr) {
    MS_ASSIGN_OR_RETURN(const std::set<std::string> keys, op_keys(options));
    for (const std::string& key : keys) {
      if (d.measured.count(key) != 0 || is_cp_key(key)) continue;
      MS_RETURN_IF_ERROR(time_key(key, options, timer, d.measured));
    }
  }
  c.profile = timer.quality();
  return Status::OK();
}

// Latency: the larger of a 1000-round 8-byte ping-pong between ranks 0 and 1 (half a round
// trip) and the cost of a collective between compute, as the trainer issues them: 50 rounds of
// a GEMM then a 256 KiB all-reduce, less the GEMMs and the all-reduce's bandwidth term, per
// ring step. On an oversubscribed or shared CPU the second is far larger: a rank that waits
// yields its core, and the collective completes only when every peer is scheduled again.
// Bus bandwidth: all-reduces of 16 MiB over every rank.
Result<Link> measure_links(comm::Communicator& world) {
  std::vector<float> small(2, 1.0f);
  MS_RETURN_IF_ERROR(world.barrier());
  const int rounds = 1000;
  Stopwatch watch;
  for (int i = 0; i < rounds && world.rank() < 2; ++i) {
    if (world.rank() == 0) {
      MS_RETURN_IF_ERROR(world.send(small.data(), 2, DType::kF32, 1, 7));
      MS_RETURN_IF_ERROR(world.recv(small.data(), 2, DType::kF32, 1, 7));
    } else {
      MS_RETURN_IF_ERROR(world.recv(small.data(), 2, DType::kF32, 0, 7));
      MS_RETURN_IF_ERROR(world.send(small.data(), 2, DType::kF32, 0, 7));
    }
  }
  const double ping_us = watch.elapsed_s() / rounds / 2 * 1e6;
  const size_t count = size_t{4} << 20;
  std::vector<float> send(count, 1.0f), recv(count);
  MS_RETURN_IF_ERROR(
      world.allreduce(send.data(), recv.data(), count, DType::kF32, comm::ReduceOp::kSum));
  MS_RETURN_IF_ERROR(world.barrier());
  const int reps = 5;
  watch.reset();
  for (int i = 0; i < reps; ++i) {
    MS_RETURN_IF_ERROR(
        world.allreduce(send.data(), recv.data(), count, DType::kF32, comm::ReduceOp::kSum));
  }
  const double t = watch.elapsed_s() / reps;
  const int n = world.size();
  const double busbw = static_cast<double>(count * 4) / t * 2.0 * (n - 1) / n / 1e9;
  // Collectives between compute.
  const size_t mid = size_t{64} << 10;
  const int mixed_rounds = 50;
  const double gemm_s = gemm_time(256, 256, 256, 0.05);
  std::vector<double> rounds_s;
  MS_RETURN_IF_ERROR(world.barrier());
  for (int i = 0; i < mixed_rounds; ++i) {
    watch.reset();
    gemm_time(256, 256, 256, 0);
    MS_RETURN_IF_ERROR(
        world.allreduce(send.data(), recv.data(), mid, DType::kF32, comm::ReduceOp::kSum));
    rounds_s.push_back(watch.elapsed_s());
  }
  double mixed = lower_quartile(rounds_s);
  MS_RETURN_IF_ERROR(world.broadcast(&mixed, sizeof(double), DType::kU8, 0));
  // gemm_time(.., 0) runs the GEMM 9 times (a warm-up and 8 timed).
  const double wire = static_cast<double>(mid * 4) * 2.0 * (n - 1) / n / (busbw * 1e9);
  const double sync_us = std::max(0.0, mixed - 9 * gemm_s - wire) / (2.0 * (n - 1)) * 1e6;
  return Link{busbw, std::max(ping_us, sync_us)};
}

// A trainer-like mix of work (a GEMM and a STREAM triad over 64 MiB), timed over about a second.
double mixed_work_seconds() {
  return time_op(
      [] {
        gemm_time(256, 256, 256, 0.05);
        measure_stream_gbs(StreamKernel::kTriad, size_t{8} << 20, 2);
      },
      1.0);
}

// Every rank runs the mix at once; rank 0's time against its time alone.
Result<double> measure_concurrency(comm::Communicator& world, double alone_seconds) {
  MS_RETURN_IF_ERROR(world.barrier());
  double seconds = mixed_work_seconds();
  MS_RETURN_IF_ERROR(world.broadcast(&seconds, sizeof(double), DType::kU8, 0));
  return std::min(1.0, alone_seconds / seconds);
}

// Runs `work` on ranks [0, count) while the others sleep (a rank waiting inside an MPI call
// spins and would take a core from the measurement), then agrees on its status. The ranks that
// sleep wait for a broadcast that rank 0 posts only after its work, so collectives inside the
// work cannot complete it early.
Status on_ranks_alone(comm::Communicator& world, int count,
                      const std::function<Status()>& work) {
  const bool member = world.rank() < count;
  Status status = member ? work() : Status::OK();
  uint8_t done = 0;
  MS_ASSIGN_OR_RETURN(comm::Request request, world.ibroadcast(&done, 1, DType::kU8, 0));
  if (!member) {
    for (;;) {
      MS_ASSIGN_OR_RETURN(const bool finished, request.test());
      if (finished) break;
      usleep(2000);
    }
  }
  MS_RETURN_IF_ERROR(request.wait());
  MS_RETURN_IF_ERROR(world.barrier());
  return status;
}

}  // namespace

Result<Cluster> measure_cluster(comm::Communicator& world, const ProfileOptions& options) {
  if (world.size() < 2) {
    return InvalidArgument(
        "--profile measures the links too and needs at least two ranks: run "
        "`mpirun -np 2 ms-train plan --profile FILE`");
  }
  Cluster c;
  c.name = options.name;
  c.ranks = world.size();
  c.ranks_per_node = world.size();
  c.devices_per_node = node_cores();
  c.memory_per_rank_gib = node_memory_gib() / world.size();
  c.device.peak_tflops["f32"] = 1;  // replaced by the measurement; the curve needs a peak first
  MS_RETURN_IF_ERROR(on_ranks_alone(world, 1, [&] { return measure_device(options, c); }));
  double alone = 0;
  MS_RETURN_IF_ERROR(on_ranks_alone(world, 1, [&] {
    alone = mixed_work_seconds();
    return Status::OK();
  }));
  MS_RETURN_IF_ERROR(world.broadcast(&alone, sizeof(double), DType::kU8, 0));
  // "Concurrent" is every device of the node busy, one rank each: with more ranks than cores the
  // first `devices` ranks measure while the rest sleep (sharing an oversubscribed core is
  // modelled on top, op_costs.h). The links need two ranks even on one core.
  const int devices = std::max(2, std::min(world.size(), c.devices_per_node));
  MS_ASSIGN_OR_RETURN(std::unique_ptr<comm::Communicator> busy,
                      world.split(world.rank() < devices ? 0 : comm::Communicator::kNoColor,
                                  world.rank(), "profile-devices"));
  MS_RETURN_IF_ERROR(on_ranks_alone(world, devices, [&]() -> Status {
    MS_ASSIGN_OR_RETURN(c.concurrency_efficiency, measure_concurrency(*busy, alone));
    if (options.config != nullptr) MS_RETURN_IF_ERROR(measure_concurrent_ops(*busy, options, c));
    MS_ASSIGN_OR_RETURN(c.intra_node, measure_links(*busy));
    MS_ASSIGN_OR_RETURN(c.dp_cost, measure_dp_reduction_cost(*busy));
    return Status::OK();
  }));
  c.inter_node = c.intra_node;
  if (options.config != nullptr) MS_RETURN_IF_ERROR(measure_cp_rings(world, options, c));
  // Every rank at once on fewer cores: the links as an oversubscribed job sees them.
  if (world.size() > c.devices_per_node) {
    MS_ASSIGN_OR_RETURN(c.oversubscribed, measure_links(world));
    MS_ASSIGN_OR_RETURN(c.dp_cost_oversubscribed, measure_dp_reduction_cost(world));
  }
  c.runtime_overhead_mib = resident_mib();
  return c;
}

}  // namespace ms::plan
