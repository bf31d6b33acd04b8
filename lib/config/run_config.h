// RunConfig: the typed form of a training run's YAML config (see docs/config.md), grouped by
// concern as in the design's "A job from a shell": run, model (with model.moe), parallel,
// optim, train, data, checkpoint, telemetry. Member initializers are the defaults; the schema
// in run_config.cc declares each key's path, description and constraints once, and the
// functions below are what tools call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/schema.h"
#include "core/status.h"

namespace ms::config {

enum class OptimizerKind { kAdamW, kLamb };
enum class LrSchedule { kCosine, kLinear, kConstant };
// parallel.recompute: which activations the backward recomputes instead of keeping.
enum class Recompute { kNone, kSelective, kFull };
// train.precision: the number format of the matmuls and attention.
enum class Precision { kF32, kBf16 };

std::span<const EnumName<OptimizerKind>> enum_names(OptimizerKind);
std::span<const EnumName<LrSchedule>> enum_names(LrSchedule);
std::span<const EnumName<Recompute>> enum_names(Recompute);
std::span<const EnumName<Precision>> enum_names(Precision);

struct RunSettings {
  std::string name = "run";
  std::string dir = "runs/run";
  int64_t seed = 1234;
  bool operator==(const RunSettings&) const = default;
};

struct MoeConfig {
  int64_t num_experts = 0;  // 0: dense feed-forward blocks
  int64_t top_k = 2;
  double aux_loss_coef = 0.01;
  int64_t shared_expert_d_ff = 0;  // 0: no shared expert
  double capacity_factor = 0;      // training: 0 dropless, else ceil(f * n * k / E) per expert
  double z_loss_coef = 0;          // router z-loss weight (ST-MoE); 0: off
  // Auxiliary-loss-free balancing (DeepSeek-V3): a per-expert routing bias, not trained but
  // moved by bias_update_rate after every step against the observed load.
  bool expert_bias = false;
  double bias_update_rate = 1e-3;
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  int64_t vocab_size = 8192;
  int64_t d_model = 512;
  int64_t n_layers = 8;
  int64_t n_heads = 8;
  int64_t n_kv_heads = 4;
  int64_t d_ff = 1376;
  int64_t max_seq_len = 1024;
  double rope_theta = 10000.0;
  bool tie_embeddings = false;
  double norm_eps = 1e-5;
  bool parallel_block = false;  // MegaScale parallel attention + FFN block
  int64_t sliding_window = 0;   // 0: full causal attention
  MoeConfig moe;
  bool operator==(const ModelConfig&) const = default;
};

// Compressed data-parallel communication under ZeRO-1 (docs/train.md, "Compressed data
// parallelism"; parallel/compressed_dp.h).
struct CompressSettings {
  std::string weights = "none";  // none | int8 | int4: the parameter all-gather
  std::string grads = "none";    // none | int8 | int4 | two-level: the gradient reduce-scatter
  int64_t group_size = 2048;        // values per scale: weights, one-level and intra-node grads
  int64_t inter_group_size = 128;   // two-level: the inter-node (4-bit) hop's group size
  bool hadamard = false;            // smooth gradient groups with a Hadamard transform
  bool error_feedback = false;      // keep each rank's gradient compression residual
  int64_t reset_every = 0;          // error reset every H steps (a full-precision step); 0: never
  bool weight_diff = true;          // weights: send the difference from the last step's replica
  std::string rounding = "stochastic";  // stochastic | nearest
  int64_t min_numel = 4096;         // smaller tensors (and 1-D ones, and routers) go as f32
  bool check_replicas = false;      // compare a checksum of every replica after each step
  bool operator==(const CompressSettings&) const = default;
};

struct ParallelConfig {
  int64_t dp = 1;
  int64_t tp = 1;
  int64_t pp = 1;
  int64_t vpp = 1;                   // virtual pipeline stages (model chunks) per pp rank
  std::string schedule = "1f1b";     // 1f1b | interleaved | zero-bubble
  std::vector<int64_t> pp_layers;    // layers per virtual stage; empty: an even split
  int64_t ep = 1;
  int64_t cp = 1;  // context parallelism: each sequence split over cp ranks (ring attention)
  std::string ep_comm_dtype = "f32";  // f32 | bf16: the wire format of the ep all-to-alls
  // Token chunks of a MoE layer's all-to-all round trip. 1 by default: on the CPU with
  // OpenMPI more chunks measured slower (docs/bench/train.md, "Expert parallelism").
  int64_t ep_overlap_chunks = 1;
  bool expert_tp = true;  // with tp > 1: experts split over tp (else whole, tokens split)
  int64_t zero = 1;
  int64_t loaders = 0;  // trailing world ranks that run data loaders instead of the model
  bool sequence_parallel = true;  // with tp > 1: activations between blocks split along the sequence
  // With tp > 1: chunked tp collectives overlapped with GEMMs. Off by default: on the CPU with
  // OpenMPI it measured slower than one collective each (docs/bench/train.md).
  bool tp_overlap = false;
  int64_t tp_overlap_chunks = 4;  // chunks each overlapped tp collective is split into
  Recompute recompute = Recompute::kNone;
  CompressSettings compress;
  bool operator==(const ParallelConfig&) const = default;
};

// Loss-spike guard: an update is skipped when the loss or the gradient norm lies more than
// `zscore` standard deviations above the mean of the last `window` accepted steps.
struct SpikeGuardConfig {
  bool enabled = true;
  int64_t window = 50;
  double zscore = 6.0;
  bool operator==(const SpikeGuardConfig&) const = default;
};

struct OptimConfig {
  OptimizerKind name = OptimizerKind::kAdamW;
  double lr = 3.0e-4;
  std::vector<double> betas = {0.9, 0.95};  // exactly two: (beta1, beta2)
  double eps = 1.0e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping
  LrSchedule schedule = LrSchedule::kCosine;
  int64_t warmup_steps = 100;
  double min_lr = 3.0e-5;
  SpikeGuardConfig spike_guard;
  bool operator==(const OptimConfig&) const = default;
};

struct TrainConfig {
  int64_t steps = 1000;
  int64_t global_batch = 64;
  int64_t micro_batch = 4;
  int64_t seq_len = 256;
  int64_t eval_every = 100;  // 0: never
  int64_t eval_batches = 4;  // global validation batches per evaluation
  int64_t log_every = 1;
  double mfu_peak_gflops = 0;  // per rank; 0: measure the sgemm rate at start
  bool overlap_grad_reduce = true;
  double bucket_mb = 4.0;
  bool document_mask = false;       // attention stays inside each document of a packed sample
  bool document_positions = false;  // rotary positions restart per document (needs the mask)
  std::string device = "cpu";        // "cpu", "cuda" or "cuda:N" (core/device.h parse_device)
  Precision precision = Precision::kF32;
  bool operator==(const TrainConfig&) const = default;
};

struct DataConfig {
  std::string plan;  // empty: not given; the trainer asks for one
  int64_t eod_id = -1;  // end-of-document token id; -1: the one the datasets' meta records
  bool operator==(const DataConfig&) const = default;
};

struct CheckpointConfig {
  int64_t every = 100;  // 0: only at the end
  bool async = true;
  int64_t keep = 3;     // 0: keep all
  std::string resume = "auto";  // "auto", "none" or a checkpoint path
  double max_write_mbps = 0;    // 0: unpaced
  bool direct_io = true;        // data files bypass the page cache where the filesystem allows
  bool operator==(const CheckpointConfig&) const = default;
};

// Where ranks sit and, for measurements on one machine, a simulated inter-node link
// (comm/simulated_link.h).
struct SimulatedLinkConfig {
  double gbps = 0;  // 0: no simulated link
  double latency_us = 0;
  bool operator==(const SimulatedLinkConfig&) const = default;
};

struct CommConfig {
  int64_t ranks_per_node = 0;  // 0: nodes from the hostnames
  SimulatedLinkConfig simulate_link;
  bool operator==(const CommConfig&) const = default;
};

struct TelemetryConfig {
  double every_s = 1.0;
  bool trace = true;
  double watchdog_s = 300;  // a collective waiting this long is reported; 0: no watchdog
  bool operator==(const TelemetryConfig&) const = default;
};

// Test-only fault injection (docs/supervise.md, "Fault injection"). A rank is named by its
// machine slot: its place in the launch `ms-diagnose supervise` started first (which it passes
// in MS_SUPERVISE_SLOTS), else its world rank, so an injected fault stays on its slot across
// restarts the way a real fault stays on its machine. -1: no such fault.
struct DebugConfig {
  int64_t slow_rank = -1;  // sleeps slow_ms at the start of every step from slow_from_step on
  double slow_ms = 0;
  int64_t slow_from_step = 1;
  int64_t kill_rank = -1;  // killed by SIGKILL at the start of step kill_step
  int64_t kill_step = 1;
  int64_t hang_rank = -1;  // stops at the start of step hang_step and never returns
  int64_t hang_step = 1;
  int64_t nan_rank = -1;  // its loss is NaN at step nan_step
  int64_t nan_step = 1;
  bool nan_repeat = false;  // false: once per run.dir (a transient fault); true: every time
  bool operator==(const DebugConfig&) const = default;
};

struct RunConfig {
  RunSettings run;
  ModelConfig model;
  ParallelConfig parallel;
  OptimConfig optim;
  TrainConfig train;
  DataConfig data;
  CheckpointConfig checkpoint;
  TelemetryConfig telemetry;
  CommConfig comm;
  DebugConfig debug;
  bool operator==(const RunConfig&) const = default;
};

// The schema every function below uses; built once on first use.
const Schema<RunConfig>& run_config_schema();

// Reads the YAML file at `path`, applies each "key=value" of `sets` in order, and validates.
// Failure: NotFound/IOError for the file, InvalidArgument listing every problem, one a line,
// each as "path:line:col: ..." or "--set key=value: ...".
Result<RunConfig> load_run_config(const std::string& path,
                                  const std::vector<std::string>& sets = {});

// As load_run_config, from YAML text named `source_name` in errors.
Result<RunConfig> run_config_from_yaml_text(std::string_view text, std::string_view source_name,
                                            const std::vector<std::string>& sets = {});

// Every key with its effective value, as YAML that loads back to `config` exactly; with
// `describe`, each key carries its description as a comment (for config.resolved.yaml).
std::string dump_yaml(const RunConfig& config, bool describe = false);

// The key listing for `--help`-style output: key, type, default, description.
std::string help_text();

// The Markdown key reference embedded in docs/config.md.
std::string reference_markdown();

}  // namespace ms::config
