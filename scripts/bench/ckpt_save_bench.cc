// ckpt_save_bench: the training save path of lib/ckpt (Checkpointer save/poll, load_tensors,
// reshard_checkpoint) on about 1 GiB of f32 state shaped the way ms-train saves it: every weight
// replicated over the data-parallel ranks, and both Adam moments split ZeRO-1 style, the
// concatenation of all parameters cut into one contiguous flat range per rank. Three modes, each
// run under mpirun with the rank count being the data-parallel size:
//   save    --dir D      a synchronous save into D/sync (removed afterwards), then asynchronous
//                        copy-on-write saves through one Checkpointer into D/async while the
//                        caller keeps "training" (per step --gemms sgemms standing in for forward
//                        and backward, a barrier, then the "optimizer update": before_overwrite_all()
//                        and a pass that negates every element of the state, then
//                        Checkpointer::poll(), as the trainer polls at step boundaries); reports
//                        the caller's stall against the time to commit and the step time, and
//                        the step time during the save against --baseline-steps steps with no
//                        save running just before it and as many just after its commit (two
//                        controls: the machine's own drift shows between them), with rank 0's
//                        first step times during the save and the update's share, for the
//                        first save (new staging buffer), a first save whose staging was reserved
//                        before the run (Checkpointer::reserve_staging, as ms-train does), the
//                        next (reused) and, with
//                        --paced-mbps, one written at that capped rate
//   load    --ckpt S     a cold load of step directory S into this run's layout (crc32c checked,
//                        every element compared with the value it was saved with: the manifest
//                        state's "sign" says how many updates had negated it, so a save that
//                        caught part of a later update shows as wrong elements)
//   reshard --ckpt S --to dp=..,zero=.. --out D   offline resharding (reshard_checkpoint)
// The page cache is dropped before every measurement when /proc/sys/vm/drop_caches is writable
// (root); load and reshard rows then say "cold", otherwise "warm". Rates are compared with the
// raw disk bandwidth that scripts/bench/ckpt_save_bench.sh measures with dd in the same run.
// Rank 0 prints table rows (no header: the script prints it once for all runs).
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/reshard_offline.h"
#include "comm/mpi_communicator.h"
#include "core/logging.h"
#include "core/timer.h"
#include "ops/gemm.h"

namespace {

using namespace ms;
using comm::ShardSpec;

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int64_t kWidth = 1024;  // columns of every weight matrix
const char* const kMomentPrefixes[] = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};

struct Args {
  std::string mode;
  std::string dir, ckpt, to, out;
  int64_t state_mib = 1024;
  int layers = 16;
  int64_t gemm_n = 512;
  int gemms = 32;
  int baseline_steps = 5;
  double paced_mbps = 0;
  bool page_cache = false;  // save: write through the page cache instead of direct I/O
  int sync_saves = 3;       // save: sync saves timed (the median is reported)
  double dd_write_mibs = 0, dd_read_mibs = 0;
};

// ---- The state ----

// One weight tensor of the model: `shape`, and where it starts in the flat concatenation of all
// parameters (the order ZeRO splits them in).
struct WeightShape {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t flat_begin = 0;
};

// Per layer a (rows, kWidth) matrix and a (kWidth) norm vector, with rows chosen so the weights
// plus two moments come to at least `state_mib` MiB.
std::vector<WeightShape> model_shapes(int64_t state_mib, int layers) {
  const int64_t weight_bytes = state_mib * (1 << 20) / 3;
  const int64_t per_layer_elements = weight_bytes / 4 / layers;
  const int64_t rows = (per_layer_elements + kWidth - 1) / kWidth;
  std::vector<WeightShape> out;
  int64_t flat = 0;
  for (int l = 0; l < layers; ++l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    out.push_back({prefix + "mlp.weight", {rows, kWidth}, rows * kWidth, flat});
    flat += rows * kWidth;
    out.push_back({prefix + "norm.weight", {kWidth}, kWidth, flat});
    flat += kWidth;
  }
  return out;
}

int64_t total_numel(const std::vector<WeightShape>& weights) {
  return weights.back().flat_begin + weights.back().numel;
}

// The value element `flat` of the concatenation holds in the weights (kind 0) or a moment
// (kinds 1, 2): a hash, so a misplaced element is caught when loading.
float state_value(int kind, int64_t flat) {
  const uint64_t h = (static_cast<uint64_t>(flat) + 1) * 0x9E3779B97F4A7C15ull +
                     static_cast<uint64_t>(kind) * 0xBF58476D1CE4E5B9ull;
  return static_cast<float>((h >> 40) & 0xffff) / 65536.0f - 0.5f;
}

// The part of one weight's moments a dp rank owns: elements [begin, end) of the weight, stored at
// `local` in the rank's moment buffers.
struct Segment {
  size_t weight = 0;
  int64_t begin = 0, end = 0, local = 0;
};

std::vector<Segment> owned_segments(const std::vector<WeightShape>& weights,
                                    const comm::SplitRange& range) {
  std::vector<Segment> out;
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightShape& w = weights[i];
    const int64_t lo = std::max(range.offset, w.flat_begin);
    const int64_t hi = std::min(range.offset + range.length, w.flat_begin + w.numel);
    if (lo < hi) out.push_back({i, lo - w.flat_begin, hi - w.flat_begin, lo - range.offset});
  }
  return out;
}

// What one rank holds: all weights (concatenated) and its ZeRO range of both moments.
struct RankState {
  std::vector<WeightShape> weights;
  comm::SplitRange range;
  std::vector<Segment> segments;
  std::vector<float> params, moments[2];
  float sign = 1;  // the state is sign * fill()'s values

  RankState(std::vector<WeightShape> w, int rank, int size)
      : weights(std::move(w)), range(comm::split_range(total_numel(weights), size, rank)),
        segments(owned_segments(weights, range)),
        params(static_cast<size_t>(total_numel(weights))),
        moments{std::vector<float>(static_cast<size_t>(range.length)),
                std::vector<float>(static_cast<size_t>(range.length))} {}

  void fill() {
    for (size_t i = 0; i < params.size(); ++i) params[i] = state_value(0, static_cast<int64_t>(i));
    for (int k = 0; k < 2; ++k) {
      for (int64_t i = 0; i < range.length; ++i) {
        moments[k][i] = state_value(k + 1, range.offset + i);
      }
    }
  }
  // The simulated optimizer update: it rewrites every element of the state, as Adam does, and
  // exactly (negation), so the values stay known.
  void negate() {
    for (float& x : params) x = -x;
    for (auto& m : moments) {
      for (float& x : m) x = -x;
    }
    sign = -sign;
  }
  // Elements that differ from sign * fill()'s values.
  int64_t count_wrong() const {
    int64_t wrong = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      wrong += params[i] != sign * state_value(0, static_cast<int64_t>(i));
    }
    for (int k = 0; k < 2; ++k) {
      for (int64_t i = 0; i < range.length; ++i) {
        wrong += moments[k][i] != sign * state_value(k + 1, range.offset + i);
      }
    }
    return wrong;
  }
  uint64_t bytes() const { return 4 * (params.size() + 2 * moments[0].size()); }
};

// The slice `s` of weight `w`'s moments, as the trainer describes it.
Result<ShardSpec> moment_spec(const WeightShape& w, const Segment& s) {
  return ShardSpec::flat_range(w.shape, s.begin, s.end);
}

Result<std::vector<ckpt::SaveTensor>> save_tensors(const RankState& st) {
  std::vector<ckpt::SaveTensor> out;
  for (const WeightShape& w : st.weights) {
    out.push_back({w.name, DType::kF32, ShardSpec::replicated(w.shape), &st.params[w.flat_begin]});
  }
  for (const Segment& s : st.segments) {
    MS_ASSIGN_OR_RETURN(ShardSpec spec, moment_spec(st.weights[s.weight], s));
    for (int k = 0; k < 2; ++k) {
      out.push_back({kMomentPrefixes[k] + st.weights[s.weight].name, DType::kF32, spec,
                     &st.moments[k][s.local], true});
    }
  }
  return out;
}

Result<std::vector<ckpt::LoadTensor>> load_requests(RankState& st) {
  std::vector<ckpt::LoadTensor> out;
  for (const WeightShape& w : st.weights) {
    out.push_back({w.name, DType::kF32, ShardSpec::replicated(w.shape), &st.params[w.flat_begin]});
  }
  for (const Segment& s : st.segments) {
    MS_ASSIGN_OR_RETURN(ShardSpec spec, moment_spec(st.weights[s.weight], s));
    for (int k = 0; k < 2; ++k) {
      out.push_back({kMomentPrefixes[k] + st.weights[s.weight].name, DType::kF32, spec,
                     &st.moments[k][s.local]});
    }
  }
  return out;
}

// Every tensor of the model, for check_tensors (as the trainer checks before resuming).
std::vector<ckpt::ExpectedTensor> expected_tensors(const std::vector<WeightShape>& weights) {
  std::vector<ckpt::ExpectedTensor> out;
  for (const WeightShape& w : weights) {
    out.push_back({w.name, DType::kF32, w.shape});
    for (const char* prefix : kMomentPrefixes) {
      out.push_back({prefix + w.name, DType::kF32, w.shape});
    }
  }
  return out;
}

// ---- Measurement helpers ----

// Rank 0 flushes dirty pages and drops the page cache; "cold" when that worked, else "warm".
Result<std::string> drop_page_cache(comm::Communicator& world) {
  int32_t cold = 0;
  if (world.rank() == 0) {
    ::sync();
    std::ofstream drop("/proc/sys/vm/drop_caches");
    drop << "3" << std::flush;
    cold = drop.good() ? 1 : 0;
  }
  MS_RETURN_IF_ERROR(world.broadcast(&cold, 1, DType::kI32, 0));
  MS_RETURN_IF_ERROR(world.barrier());
  return std::string(cold ? "cold" : "warm");
}

// The slowest rank's time in seconds (exchanged as integer nanoseconds): a collective operation
// ends when its last rank does.
Result<double> max_over_ranks(comm::Communicator& world, double seconds) {
  const int64_t mine = static_cast<int64_t>(seconds * 1e9);
  int64_t slowest = mine;
  MS_RETURN_IF_ERROR(world.allreduce(&mine, &slowest, 1, DType::kI64, comm::ReduceOp::kMax));
  return static_cast<double>(slowest) * 1e-9;
}

// One table row (rank 0 only): rate in MiB/s and its ratio to the dd baseline `dd_mibs`.
void print_row(comm::Communicator& world, const std::string& name, double seconds, double bytes,
               double dd_mibs, const std::string& detail) {
  if (world.rank() != 0) return;
  const double mibs = bytes / kMiB / seconds;
  char ratio[32] = "-";
  if (dd_mibs > 0) std::snprintf(ratio, sizeof(ratio), "%.2fx", mibs / dd_mibs);
  std::printf("| %s | %d | %.2f | %.1f | %s | %s |\n", name.c_str(), world.size(), seconds, mibs,
              ratio, detail.c_str());
  std::fflush(stdout);
}

// printf into a std::string, for the detail column.
template <typename... Args>
std::string printf_string(const char* fmt, Args... args) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, args...);
  return buf;
}

ckpt::SaveRequest save_request(comm::Communicator& world, const Args& a, const std::string& dir,
                               int64_t step, bool async, float sign) {
  ckpt::SaveRequest r;
  r.direct_io = !a.page_cache;
  r.checkpoints_dir = dir;
  r.step = step;
  r.layout = {world.size(), world.size(), 1, 1, 1, 1};
  r.config_yaml = "run: {name: ckpt_save_bench}\n";
  r.state = {{"step", step}, {"sign", sign}};
  r.async = async;
  r.copy_on_write = async;  // the "training step" calls before_overwrite_all() before its update
  return r;
}

// ---- save ----

// A save row's name, marked when the data files go through the page cache.
std::string save_label(const Args& a, const std::string& name) {
  return a.page_cache ? name + " [page cache]" : name;
}

// The sync save `a.sync_saves` times (the disk of a shared VM varies from one minute to the
// next): one row with the median, each run's time in the detail.
Status bench_sync_save(comm::Communicator& world, const RankState& st, const Args& a,
                       double state_bytes) {
  MS_ASSIGN_OR_RETURN(const std::vector<ckpt::SaveTensor> tensors, save_tensors(st));
  std::vector<double> times;
  std::string each;
  ckpt::SaveReport report;
  for (int run = 0; run < std::max(a.sync_saves, 1); ++run) {
    MS_RETURN_IF_ERROR(drop_page_cache(world).status());  // no dirty pages of earlier runs
    ckpt::Checkpointer checkpointer(world);
    Stopwatch watch;
    MS_RETURN_IF_ERROR(
        checkpointer.save(tensors, save_request(world, a, a.dir + "/sync", 1, false, st.sign)));
    MS_ASSIGN_OR_RETURN(const double seconds, max_over_ranks(world, watch.elapsed_s()));
    times.push_back(seconds);
    each += printf_string("%.2f ", seconds);
    report = *checkpointer.last_report();
    MS_RETURN_IF_ERROR(world.barrier());
    std::error_code removed;
    if (world.rank() == 0) std::filesystem::remove_all(a.dir + "/sync", removed);
    if (removed) {  // not fatal: it only costs disk space; the script removes its work dir
      std::fprintf(stderr, "ckpt_save_bench: could not remove %s/sync: %s\n", a.dir.c_str(),
                   removed.message().c_str());
    }
    MS_RETURN_IF_ERROR(world.barrier());
  }
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  print_row(world, save_label(a, "save, sync"), sorted[sorted.size() / 2], state_bytes,
            a.dd_write_mibs,
            printf_string("caller blocked throughout; median of %zu runs: %ss; rank 0 wrote "
                          "%.0f MiB",
                          times.size(), each.c_str(),
                          static_cast<double>(report.bytes_written) / kMiB));
  return Status::OK();
}

// A training step: `gemms` (n, n) x (n, n) sgemms standing in for forward and backward, a
// barrier standing in for the gradient reduction that keeps real data-parallel ranks in step,
// then the optimizer update, which rewrites the whole state (first before_overwrite_all(), as
// lib/train does, so an in-flight copy-on-write save keeps its step's values), and a barrier
// standing in for ZeRO's parameter all-gather (so poll() does not absorb rank skew).
struct Compute {
  comm::Communicator& world;
  RankState& state;
  int64_t n;
  int gemms;
  std::vector<float> a, b, c;
  double update_s = 0;  // in the update (copies of the snapshot included), summed
  Compute(comm::Communicator& w, RankState& st, int64_t size, int count)
      : world(w), state(st), n(size), gemms(count), a(static_cast<size_t>(n * n), 0.5f),
        b(static_cast<size_t>(n * n), 0.25f), c(static_cast<size_t>(n * n)) {}
  Status step(ckpt::Checkpointer* checkpointer) {
    for (int i = 0; i < gemms; ++i) {
      ops::sgemm(ops::Transpose::kNo, ops::Transpose::kNo, n, n, n, 1.0f, a.data(), n, b.data(),
                 n, 0.0f, c.data(), n);
    }
    MS_RETURN_IF_ERROR(world.barrier());
    Stopwatch update;
    if (checkpointer != nullptr) checkpointer->before_overwrite_all();
    state.negate();
    update_s += update.elapsed_s();
    return world.barrier();
  }
};

// CPU time the hypervisor gave to others while this VM's vCPUs wanted it (the "steal" column
// of /proc/stat, all CPUs, in seconds); 0 where there is no such file. A save's disk traffic
// can cost the guest CPU time this way (a VMM thread emulating the disk under the same quota
// as the vCPUs) without any guest thread showing it.
double machine_steal_s() {
  std::ifstream stat("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
            steal = 0;
  if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu") {
    return 0;
  }
  return static_cast<double>(steal) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

Result<double> mean_step_s(Compute& compute, int steps) {
  Stopwatch watch;
  for (int i = 0; i < steps; ++i) MS_RETURN_IF_ERROR(compute.step(nullptr));
  return watch.elapsed_s() / steps;
}

// A control for a save's step times: `steps` steps with no save running, their mean (the
// slowest rank's) and this rank's mean update.
struct ControlSteps {
  double step_s = 0;
  double update_s = 0;
  double steal_s = 0;  // the machine's, per step
};
Result<ControlSteps> control_steps(comm::Communicator& world, Compute& compute, int steps) {
  const double update_at_start_s = compute.update_s;
  const double steal_at_start_s = machine_steal_s();
  MS_ASSIGN_OR_RETURN(const double mine_s, mean_step_s(compute, steps));
  ControlSteps out;
  out.steal_s = (machine_steal_s() - steal_at_start_s) / static_cast<double>(steps);
  MS_ASSIGN_OR_RETURN(out.step_s, max_over_ranks(world, mine_s));
  out.update_s = (compute.update_s - update_at_start_s) / static_cast<double>(steps);
  return out;
}

// One asynchronous save while "training" continues: steps, poll() after each. `label` says
// whether the checkpointer's staging buffer is new (the first save of a run) or reused from the
// previous save (every later save), and whether the writes are paced.
Status time_async_save(comm::Communicator& world, ckpt::Checkpointer& checkpointer,
                       Compute& compute, const std::vector<ckpt::SaveTensor>& tensors,
                       const Args& a, int64_t step, const std::string& label, double paced_mbps,
                       double state_bytes, double idle_step_s) {
  MS_RETURN_IF_ERROR(drop_page_cache(world).status());  // no dirty pages of earlier runs
  // The control for this save's step times: steps just before it with no save running, so a
  // drift of the machine's speed over the run (a shared VM's) is not charged to the save.
  MS_ASSIGN_OR_RETURN(const ControlSteps before, control_steps(world, compute, a.baseline_steps));
  ckpt::SaveRequest request = save_request(world, a, a.dir + "/async", step, true, compute.state.sign);
  request.max_write_mbps = paced_mbps;
  Stopwatch total;
  MS_RETURN_IF_ERROR(checkpointer.save(tensors, std::move(request)));
  const double save_call_s = total.elapsed_s();
  double poll_s = 0, compute_s = 0;
  const double update_before_s = compute.update_s;
  const double steal_before_s = machine_steal_s();
  int64_t steps = 0;
  std::string step_ms;  // rank 0's step times while the save runs, to see where the cost falls
  std::optional<ckpt::SaveReport> report;
  while (!report) {
    Stopwatch one;
    MS_RETURN_IF_ERROR(compute.step(&checkpointer));
    const double step_s = one.lap_s();
    compute_s += step_s;
    if (steps < 8) step_ms += printf_string("%s%.0f", steps == 0 ? "" : " ", 1e3 * step_s);
    ++steps;
    MS_ASSIGN_OR_RETURN(report, checkpointer.poll());
    poll_s += one.elapsed_s();
  }
  // The time to commit is rank 0's: the checkpoint is loadable from then on. The step boundary
  // whose poll hands the report back comes up to a step later.
  MS_ASSIGN_OR_RETURN(const double polled_s, max_over_ranks(world, total.elapsed_s()));
  const double total_s = report->committed_s;
  const double update_s = (compute.update_s - update_before_s) / static_cast<double>(steps);
  const double steal_s = (machine_steal_s() - steal_before_s) / static_cast<double>(steps);
  // The same control once the save has committed: a drift of the machine's speed shows as
  // a difference between the two controls, while a cost of the save shows against both.
  MS_ASSIGN_OR_RETURN(const ControlSteps after, control_steps(world, compute, a.baseline_steps));
  MS_ASSIGN_OR_RETURN(const double stall_s,
                      max_over_ranks(world, save_call_s + poll_s + report->caller_copy_s));
  MS_ASSIGN_OR_RETURN(const double copy_s, max_over_ranks(world, report->caller_copy_s));
  MS_ASSIGN_OR_RETURN(const double slowest_save_call_s, max_over_ranks(world, save_call_s));
  MS_ASSIGN_OR_RETURN(const double slowest_poll_s, max_over_ranks(world, poll_s));
  MS_ASSIGN_OR_RETURN(const double busy_step_s,
                      max_over_ranks(world, compute_s / static_cast<double>(steps)));
  int64_t copied = static_cast<int64_t>(report->caller_copied_bytes);
  MS_RETURN_IF_ERROR(world.allreduce(&copied, &copied, 1, DType::kI64, comm::ReduceOp::kSum));
  print_row(world, save_label(a, "save, async (" + label + ")") + ": total to commit", total_s, state_bytes,
            a.dd_write_mibs,
            printf_string("committed by rank 0 after %.2f s, handed back at the poll after "
                          "%.2f s; %.0f training steps ran meanwhile",
                          report->committed_s, polled_s, static_cast<double>(steps)));
  print_row(world, save_label(a, "save, async (" + label + ")") + ": stall (caller blocked)", stall_s, state_bytes, 0,
            printf_string("%.2f%% of total, %.2f%% of a step (slowest rank's save() %.4f s, "
                          "polls %.4f s, copies before the update %.4f s; %.0f MiB copied "
                          "there, all ranks)",
                          100.0 * stall_s / total_s, 100.0 * stall_s / idle_step_s,
                          slowest_save_call_s, slowest_poll_s, copy_s,
                          static_cast<double>(copied) / kMiB));
  if (world.rank() == 0) {
    std::printf("| (training during the async save) | %d | %.4f | - | - | mean step (%d sgemm-%"
                PRId64 " + update %.0f ms) %.1f ms vs %.1f ms (update %.0f ms) in the %d steps "
                "just before it with no save running (%.2fx the speed) and %.1f ms (update %.0f "
                "ms) in %d steps after its commit (%.2fx); rank 0's first steps: %s ms; "
                "hypervisor steal per step, both CPUs: %.1f ms during, %.1f before, %.1f after |\n",
                world.size(), busy_step_s, a.gemms, a.gemm_n, 1e3 * update_s, 1e3 * busy_step_s,
                1e3 * before.step_s, 1e3 * before.update_s, a.baseline_steps,
                before.step_s / busy_step_s, 1e3 * after.step_s, 1e3 * after.update_s,
                a.baseline_steps,
                after.step_s / busy_step_s, step_ms.c_str(), 1e3 * steal_s, 1e3 * before.steal_s,
                1e3 * after.steal_s);
  }
  return Status::OK();
}

// Asynchronous saves through one checkpointer, as a training run makes them: the first
// allocates the staging buffer, the next reuse it; with --paced-mbps a third is paced.
Status bench_async_save(comm::Communicator& world, RankState& st, const Args& a,
                        double state_bytes) {
  Compute compute(world, st, a.gemm_n, a.gemms);
  MS_ASSIGN_OR_RETURN(const double idle_mine_s, mean_step_s(compute, a.baseline_steps));
  MS_ASSIGN_OR_RETURN(const double idle_step_s, max_over_ranks(world, idle_mine_s));
  if (world.rank() == 0) {
    std::printf("| (training, no save running) | %d | %.4f | - | - | mean step: %d sgemm-%" PRId64
                " + barrier + update of the whole state + barrier |\n",
                world.size(), idle_step_s, a.gemms, a.gemm_n);
  }
  MS_ASSIGN_OR_RETURN(const std::vector<ckpt::SaveTensor> tensors, save_tensors(st));
  ckpt::Checkpointer checkpointer(world);
  MS_RETURN_IF_ERROR(time_async_save(world, checkpointer, compute, tensors, a, 2,
                                     "first, new staging", 0, state_bytes, idle_step_s));
  {
    // What ms-train's first save costs: it reserves the staging buffer before the first step.
    ckpt::Checkpointer reserved(world);
    const Stopwatch reserve;
    MS_RETURN_IF_ERROR(reserved.reserve_staging(tensors, ckpt::SaveRequest{}.max_shard_bytes));
    MS_ASSIGN_OR_RETURN(const double reserve_s, max_over_ranks(world, reserve.elapsed_s()));
    if (world.rank() == 0) {
      std::printf("| (reserve_staging before the run, not a stall) | %d | %.4f | - | - | "
                  "allocates and faults in the first save's staging |\n",
                  world.size(), reserve_s);
    }
    MS_RETURN_IF_ERROR(time_async_save(world, reserved, compute, tensors, a, 5,
                                       "first, staging reserved", 0, state_bytes, idle_step_s));
  }
  MS_RETURN_IF_ERROR(time_async_save(world, checkpointer, compute, tensors, a, 3,
                                     "next, staging reused", 0, state_bytes, idle_step_s));
  if (a.paced_mbps <= 0) return Status::OK();
  return time_async_save(world, checkpointer, compute, tensors, a, 4,
                         printf_string("next, paced at %.0f MB/s", a.paced_mbps), a.paced_mbps,
                         state_bytes, idle_step_s);
}

Status run_save(comm::Communicator& world, const Args& a) {
  RankState st(model_shapes(a.state_mib, a.layers), world.rank(), world.size());
  st.fill();
  const double state_bytes = 4.0 * 3.0 * static_cast<double>(total_numel(st.weights));
  MS_RETURN_IF_ERROR(bench_sync_save(world, st, a, state_bytes));
  return bench_async_save(world, st, a, state_bytes);
}

// ---- load and reshard ----

double checkpoint_bytes(const ckpt::Manifest& m) {
  double bytes = 0;
  for (const ckpt::TensorRecord& t : m.tensors) bytes += static_cast<double>(t.bytes());
  return bytes;
}

std::string layout_name(const ckpt::Layout& l) {
  return "dp=" + std::to_string(l.dp) + ",zero=" + std::to_string(l.zero);
}

Status run_load(comm::Communicator& world, const Args& a) {
  MS_ASSIGN_OR_RETURN(const ckpt::Manifest m, ckpt::Manifest::read(a.ckpt));
  RankState st(model_shapes(a.state_mib, a.layers), world.rank(), world.size());
  MS_ASSIGN_OR_RETURN(const std::vector<ckpt::LoadTensor> load, load_requests(st));
  st.sign = m.state.value("sign", 1.0f);
  const std::vector<ckpt::ExpectedTensor> expected = expected_tensors(st.weights);
  MS_ASSIGN_OR_RETURN(const std::string cache, drop_page_cache(world));
  Stopwatch watch;
  MS_RETURN_IF_ERROR(ckpt::check_tensors(m, expected, {}));
  MS_RETURN_IF_ERROR(ckpt::load_tensors(a.ckpt, m, load, {}, io::default_env()));
  MS_ASSIGN_OR_RETURN(const double seconds, max_over_ranks(world, watch.elapsed_s()));
  const int64_t mine[2] = {st.count_wrong(), static_cast<int64_t>(st.bytes())};
  int64_t all[2] = {0, 0};
  MS_RETURN_IF_ERROR(world.allreduce(mine, all, 2, DType::kI64, comm::ReduceOp::kSum));
  const double delivered_mib = static_cast<double>(all[1]) / kMiB;
  const ckpt::Layout to{world.size(), world.size(), 1, 1, 1, 1};
  const std::string how = m.layout == to ? "same layout" : "resharded";
  print_row(world, "load " + layout_name(m.layout) + " -> " + layout_name(to) + ", " + how + " (" +
                       cache + ")",
            seconds, checkpoint_bytes(m), a.dd_read_mibs,
            printf_string("crc32c checked; %.0f MiB delivered to the ranks (%.0f MiB/s); "
                          "%.0f wrong elements",
                          delivered_mib, delivered_mib / seconds, static_cast<double>(all[0])));
  return all[0] == 0 ? Status::OK() : Internal("loaded values differ from the saved ones");
}

Status run_reshard(comm::Communicator& world, const Args& a) {
  MS_ASSIGN_OR_RETURN(const ckpt::Manifest m, ckpt::Manifest::read(a.ckpt));
  ckpt::ReshardOptions options;
  options.output_dir = a.out;
  MS_ASSIGN_OR_RETURN(options.target, ckpt::parse_reshard_target(a.to));
  MS_ASSIGN_OR_RETURN(const std::string cache, drop_page_cache(world));
  Stopwatch watch;
  MS_ASSIGN_OR_RETURN(const std::string step_dir,
                      ckpt::reshard_checkpoint(a.ckpt, options, world, io::default_env()));
  MS_ASSIGN_OR_RETURN(const double seconds, max_over_ranks(world, watch.elapsed_s()));
  MS_ASSIGN_OR_RETURN(const ckpt::Manifest out, ckpt::Manifest::read(step_dir));
  if (checkpoint_bytes(out) != checkpoint_bytes(m)) {
    return Internal("the resharded checkpoint " + step_dir + " holds a different number of bytes");
  }
  const double serial_copy_mibs =
      a.dd_write_mibs > 0 && a.dd_read_mibs > 0
          ? 1.0 / (1.0 / a.dd_write_mibs + 1.0 / a.dd_read_mibs) : 0;
  const double mibs = checkpoint_bytes(m) / kMiB / seconds;
  print_row(world, "reshard " + layout_name(m.layout) + " -> " + a.to + " (" + cache + ")",
            seconds, checkpoint_bytes(m), a.dd_write_mibs,
            serial_copy_mibs > 0
                ? printf_string("read + write; %.2fx of dd read-then-write (%.0f MiB/s)",
                         mibs / serial_copy_mibs, serial_copy_mibs)
                : std::string("read + write"));
  return Status::OK();
}

Status run(const Args& a) {
  MS_ASSIGN_OR_RETURN(auto world, comm::MpiCommunicator::world("ckpt-save-bench"));
  if (a.mode == "save") return run_save(*world, a);
  if (a.mode == "load") return run_load(*world, a);
  return run_reshard(*world, a);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("ckpt_save_bench: save/load/reshard throughput of the training save path");
  app.add_option("mode", a.mode, "save, load or reshard")
      ->required()
      ->check(CLI::IsMember({"save", "load", "reshard"}));
  app.add_option("--dir", a.dir, "save: checkpoints directory to create (sync/ and async/ in it)");
  app.add_option("--ckpt", a.ckpt, "load, reshard: step directory to read");
  app.add_option("--to", a.to, "reshard: target layout, e.g. dp=1,zero=0");
  app.add_option("--out", a.out, "reshard: output checkpoints directory");
  app.add_option("--state-mib", a.state_mib, "Total state (weights + 2 moments), MiB")
      ->check(CLI::Range(3, 1 << 20));
  app.add_option("--layers", a.layers, "Weight matrices (each with a norm vector)")
      ->check(CLI::Range(1, 4096));
  app.add_option("--gemm-n", a.gemm_n, "save: sgemm size of one simulated training step")
      ->check(CLI::Range(16, 8192));
  app.add_option("--gemms", a.gemms, "save: sgemms per simulated training step")
      ->check(CLI::Range(0, 100000));
  app.add_option("--paced-mbps", a.paced_mbps,
                 "save: also time an async save with max_write_mbps at this rate (0: none)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--sync-saves", a.sync_saves, "save: sync saves timed; the median is reported")
      ->check(CLI::PositiveNumber);
  app.add_flag("--page-cache", a.page_cache,
               "save: write the data files through the page cache, not with direct I/O");
  app.add_option("--baseline-steps", a.baseline_steps, "save: steps timed with no save running")
      ->check(CLI::Range(1, 10000));
  app.add_option("--dd-write-mibs", a.dd_write_mibs, "dd conv=fsync write rate, same run, MiB/s");
  app.add_option("--dd-read-mibs", a.dd_read_mibs, "dd iflag=direct cold read rate, MiB/s");
  CLI11_PARSE(app, argc, argv);
  const bool missing = (a.mode == "save" && a.dir.empty()) ||
                       (a.mode != "save" && a.ckpt.empty()) ||
                       (a.mode == "reshard" && (a.to.empty() || a.out.empty()));
  if (missing) {
    std::fprintf(stderr, "ckpt_save_bench: error: save needs --dir; load needs --ckpt; "
                         "reshard needs --ckpt, --to and --out\n");
    return 2;
  }
  log::set_level(log::Level::kWarn);  // the per-save info line would interleave with the table
  if (Status s = comm::init(argc, argv); !s.ok()) {
    std::fprintf(stderr, "ckpt_save_bench: error: %s\n", s.to_string().c_str());
    return 1;
  }
  const Status s = run(a);
  if (!s.ok()) std::fprintf(stderr, "ckpt_save_bench: error: %s\n", s.to_string().c_str());
  const Status f = comm::finalize();
  return s.ok() && f.ok() ? 0 : 1;
}
