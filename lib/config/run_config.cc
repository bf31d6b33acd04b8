// The run config's schema: each key of RunConfig declared once, with its description and
// constraints, plus the rules that tie keys together (head counts, batch divisibility, mesh
// sizes). Descriptions are what users read in `--help` and docs/config.md.
#include "config/run_config.h"

#include <array>
#include <limits>
#include <optional>

#include "core/device.h"

namespace ms::config {
namespace {

constexpr std::array<EnumName<OptimizerKind>, 2> kOptimizerNames{{
    {"adamw", OptimizerKind::kAdamW},
    {"lamb", OptimizerKind::kLamb},
}};

constexpr std::array<EnumName<LrSchedule>, 3> kScheduleNames{{
    {"cosine", LrSchedule::kCosine},
    {"linear", LrSchedule::kLinear},
    {"constant", LrSchedule::kConstant},
}};

constexpr std::array<EnumName<Recompute>, 3> kRecomputeNames{{
    {"none", Recompute::kNone},
    {"selective", Recompute::kSelective},
    {"full", Recompute::kFull},
}};

constexpr std::array<EnumName<Precision>, 2> kPrecisionNames{{
    {"f32", Precision::kF32},
    {"bf16", Precision::kBf16},
}};

using Cfg = RunConfig;

// MPI numbers ranks with an int, and the trainer counts ranks and pipeline stages in ints.
constexpr int64_t kMaxWorldRanks = std::numeric_limits<int>::max();

void add_run_keys(Schema<Cfg>& s) {
  s.add("run.name", "Run name, recorded in telemetry and checkpoints.", &Cfg::run,
        &RunSettings::name).non_empty();
  s.add("run.dir", "Directory for the resolved config, log, checkpoints and telemetry.",
        &Cfg::run, &RunSettings::dir).non_empty();
  s.add("run.seed", "Seed for parameter initialization and data order.", &Cfg::run,
        &RunSettings::seed).at_least(0);
}

void add_model_keys(Schema<Cfg>& s) {
  using M = ModelConfig;
  s.add("model.vocab_size", "Vocabulary size; must match the tokenizer.", &Cfg::model,
        &M::vocab_size).at_least(1);
  s.add("model.d_model", "Hidden size.", &Cfg::model, &M::d_model).at_least(1);
  s.add("model.n_layers", "Number of transformer blocks.", &Cfg::model, &M::n_layers).at_least(1);
  s.add("model.n_heads", "Attention (query) heads.", &Cfg::model, &M::n_heads).at_least(1);
  s.add("model.n_kv_heads", "Key/value heads (grouped-query attention; equal to n_heads for "
        "multi-head attention).", &Cfg::model, &M::n_kv_heads).at_least(1);
  s.add("model.d_ff", "Feed-forward (SwiGLU) inner size, per expert for MoE.", &Cfg::model,
        &M::d_ff).at_least(1);
  s.add("model.max_seq_len", "Longest sequence the model supports.", &Cfg::model,
        &M::max_seq_len).at_least(1);
  s.add("model.rope_theta", "Rotary embedding base.", &Cfg::model, &M::rope_theta).above(0.0);
  s.add("model.tie_embeddings", "Share the input embedding with the output projection.",
        &Cfg::model, &M::tie_embeddings);
  s.add("model.norm_eps", "RMSNorm epsilon.", &Cfg::model, &M::norm_eps).above(0.0);
  s.add("model.parallel_block", "MegaScale parallel block: attention and FFN read the same "
        "normed input and their outputs are summed.", &Cfg::model, &M::parallel_block);
  s.add("model.sliding_window", "Keys each query attends to (itself included); 0 attends to "
        "every earlier position.", &Cfg::model, &M::sliding_window).at_least(0);
  s.add("model.moe.num_experts", "Experts per MoE layer; 0 makes every block dense.",
        &Cfg::model, &M::moe, &MoeConfig::num_experts).at_least(0);
  s.add("model.moe.top_k", "Experts each token is routed to.", &Cfg::model, &M::moe,
        &MoeConfig::top_k).at_least(1);
  s.add("model.moe.aux_loss_coef", "Weight of the load-balancing auxiliary loss.", &Cfg::model,
        &M::moe, &MoeConfig::aux_loss_coef).at_least(0.0);
  s.add("model.moe.shared_expert_d_ff", "Inner size of a shared expert every token passes "
        "through besides its routed ones; 0 for none.", &Cfg::model, &M::moe,
        &MoeConfig::shared_expert_d_ff).at_least(0);
  s.add("model.moe.capacity_factor",
        "Training only: each expert takes at most ceil(capacity_factor * n * top_k / "
        "num_experts) of the n tokens a rank routes together (its micro-batch), the earliest "
        "tokens first, and the rest of its assignments are dropped (counted in the log and the "
        "telemetry). The count depends on the micro-batch only, so every expert-parallel "
        "layout drops the same tokens. 0: dropless.",
        &Cfg::model, &M::moe, &MoeConfig::capacity_factor).at_least(0.0);
  s.add("model.moe.z_loss_coef",
        "Weight of the router z-loss (ST-MoE): the mean over tokens of logsumexp(router "
        "logits)^2, averaged over the MoE layers like the load-balancing loss; it keeps the "
        "router logits small. 0: off.", &Cfg::model, &M::moe, &MoeConfig::z_loss_coef)
      .at_least(0.0);
  s.add("model.moe.expert_bias",
        "Auxiliary-loss-free load balancing (DeepSeek-V3): each MoE layer gets a per-expert "
        "bias, the tensor model.layers.N.block_sparse_moe.gate.e_score_correction_bias, added "
        "to the router probabilities when choosing the top_k experts (the routing weights stay "
        "the chosen probabilities, renormalized). It is not trained: after every optimizer "
        "step it moves by model.moe.bias_update_rate towards balance, from the step's load "
        "summed over all data-parallel ranks. Saved in checkpoints and used when serving.",
        &Cfg::model, &M::moe, &MoeConfig::expert_bias);
  s.add("model.moe.bias_update_rate",
        "With model.moe.expert_bias: bias += rate * sign(mean load - expert load) after every "
        "step (Megatron-LM's rule, its default rate); the load is the assignments the router "
        "chose, before any capacity drop.",
        &Cfg::model, &M::moe, &MoeConfig::bias_update_rate).at_least(0.0);
}

void add_parallel_keys(Schema<Cfg>& s) {
  using P = ParallelConfig;
  s.add("parallel.dp", "Data-parallel size.", &Cfg::parallel, &P::dp).at_least(1);
  s.add("parallel.tp", "Tensor-parallel size.", &Cfg::parallel, &P::tp).at_least(1);
  s.add("parallel.pp", "Pipeline-parallel size (stages).", &Cfg::parallel, &P::pp).at_least(1);
  s.add("parallel.vpp",
        "Virtual pipeline stages per pp rank for the interleaved schedule: each rank holds this "
        "many model chunks (stage s = chunk * pp + rank); 1 for 1f1b and zero-bubble.",
        &Cfg::parallel, &P::vpp).at_least(1);
  s.add("parallel.schedule",
        "Pipeline schedule with parallel.pp above 1: 1f1b; interleaved (1F1B over parallel.vpp "
        "chunks per rank, Megatron's order); zero-bubble (ZB-H1: the backward split into the "
        "input-gradient and the weight-gradient pass, the latter deferred into the bubbles).",
        &Cfg::parallel, &P::schedule).one_of({"1f1b", "interleaved", "zero-bubble"});
  s.add("parallel.pp_layers",
        "Layers of each virtual stage in stage order, e.g. [3, 5]; they must add up to "
        "model.n_layers. Empty: model.n_layers / (pp * vpp) each.",
        &Cfg::parallel, &P::pp_layers).at_least(1);
  s.add("parallel.ep", "Expert-parallel size, carved out of dp x cp (parallel folding).",
        &Cfg::parallel, &P::ep).at_least(1);
  s.add("parallel.cp",
        "Context-parallel size: each sequence is cut into 2 x cp chunks and rank r of the cp "
        "group holds chunks r and 2cp-1-r (balanced causal work); attention is a ring over the "
        "group. The ranks are pp x dp x cp x tp; gradients are reduced over dp x cp. "
        "train.seq_len must be divisible by 2 x cp.",
        &Cfg::parallel, &P::cp).at_least(1);
  s.add("parallel.ep_comm_dtype",
        "With parallel.ep above 1: the wire format of the expert all-to-alls (the routed rows "
        "going to their experts and the outputs coming back, forward and backward). bf16 "
        "halves the bytes; every exchanged row, the rank's own too, is rounded to bf16 "
        "(nearest even) and back.", &Cfg::parallel, &P::ep_comm_dtype).one_of({"f32", "bf16"});
  s.add("parallel.ep_overlap_chunks",
        "With parallel.ep above 1: each MoE layer's tokens are cut into this many chunks whose "
        "all-to-alls run while the other chunks' experts compute (the dispatch of chunk i+1 and "
        "the combine of chunk i-1 during chunk i; the shared expert during the first "
        "dispatch). 1 waits for each all-to-all at once (the default: on the CPU with OpenMPI "
        "the chunks measured slower). The chunking changes only the summation order of the "
        "experts' weight gradients.",
        &Cfg::parallel, &P::ep_overlap_chunks).at_least(1).at_most(64);
  s.add("parallel.expert_tp",
        "With parallel.tp above 1 and MoE layers: true splits every routed expert over the tp "
        "ranks like the dense MLP (w1/w3 by rows, w2 by columns); false keeps the experts whole "
        "on every tp rank and splits the tokens instead, each tp rank running the experts for "
        "its 1/tp of the micro-batch's tokens (and exchanging only those under parallel.ep), "
        "with the experts' gradients summed over tp.", &Cfg::parallel, &P::expert_tp);
  s.add("parallel.zero", "ZeRO stage: 0 replicates optimizer state, 1 shards it across dp.",
        &Cfg::parallel, &P::zero).at_least(0).at_most(1);
  s.add("parallel.loaders",
        "Data-loader ranks: the last K ranks of the world read the data and send the other "
        "(trainer) ranks their micro-batches; 0 loads on every trainer.",
        &Cfg::parallel, &P::loaders)
      .at_least(0)
      .at_most(kMaxWorldRanks);
  s.add("parallel.sequence_parallel",
        "With parallel.tp above 1, split the activations between blocks (norms, residual adds) "
        "along the sequence across the tp ranks: an all-gather before each column-parallel "
        "group and a reduce-scatter after each row-parallel projection instead of one "
        "all-reduce.", &Cfg::parallel, &P::sequence_parallel);
  s.add("parallel.tp_overlap",
        "With parallel.tp above 1, split each tp all-gather, reduce-scatter and all-reduce into "
        "parallel.tp_overlap_chunks pieces so that moving one overlaps the GEMM of another; "
        "false issues each as one blocking collective (faster on CPUs with MPI over shared "
        "memory, where the same cores copy and compute).", &Cfg::parallel, &P::tp_overlap);
  s.add("parallel.tp_overlap_chunks", "Pieces each overlapped tp collective is split into.",
        &Cfg::parallel, &P::tp_overlap_chunks).at_least(1).at_most(64);
  s.add("parallel.recompute",
        "Activation recomputation: none keeps every activation the backward needs; selective "
        "recomputes the attention internals (q, k, v, the attention output); full keeps only "
        "each layer's input and recomputes the layer in the backward.",
        &Cfg::parallel, &P::recompute);
}

void add_compress_keys(Schema<Cfg>& s) {
  using P = ParallelConfig;
  using C = CompressSettings;
  s.add("parallel.compress.weights",
        "With parallel.zero 1 and dp above 1: the format of the parameter all-gather after each "
        "update. int8/int4 send each rank's quantized difference between its updated shard and "
        "the replica all ranks hold (SDP4Bit); every rank adds every decoded difference, so the "
        "replicas stay identical and what one step's rounding lost is in the next difference. "
        "The master weights (what checkpoints hold) stay full precision.",
        &Cfg::parallel, &P::compress, &C::weights).one_of({"none", "int8", "int4"});
  s.add("parallel.compress.grads",
        "With parallel.zero 1 and dp above 1: the format of the gradient reduce-scatter. int8 "
        "and int4 quantize every rank's gradient for one all-to-all; two-level sends 8 bits "
        "within a node and 4 bits across nodes, each hop dequantizing, summing and "
        "requantizing (nodes: comm.ranks_per_node).",
        &Cfg::parallel, &P::compress, &C::grads)
      .one_of({"none", "int8", "int4", "two-level"});
  s.add("parallel.compress.group_size",
        "Values per scale for the weights, one-level gradients and two-level's intra-node hop.",
        &Cfg::parallel, &P::compress, &C::group_size).at_least(8).at_most(1 << 20);
  s.add("parallel.compress.inter_group_size",
        "Values per scale of two-level's inter-node (4-bit) hop.",
        &Cfg::parallel, &P::compress, &C::inter_group_size).at_least(8).at_most(1 << 20);
  s.add("parallel.compress.hadamard",
        "Transform compressed gradients in blocks of 32 with an orthonormal Hadamard matrix "
        "before quantizing (and back after the sum), so an outlier no longer sets its whole "
        "group's scale.", &Cfg::parallel, &P::compress, &C::hadamard);
  s.add("parallel.compress.error_feedback",
        "Keep what each rank's gradient quantization lost and add it to the next step's "
        "gradient.", &Cfg::parallel, &P::compress, &C::error_feedback);
  s.add("parallel.compress.reset_every",
        "Error reset (CSER) every H steps: that step's gradients, with every kept residual, and "
        "its weights go in full precision. 0: never. Checkpoint steps always go in full "
        "precision, so a checkpoint holds exactly what every replica holds.",
        &Cfg::parallel, &P::compress, &C::reset_every).at_least(0);
  s.add("parallel.compress.weight_diff",
        "Weights: quantize the difference from the replica (true) or the weights themselves "
        "(false, the naive scheme, kept for comparison).",
        &Cfg::parallel, &P::compress, &C::weight_diff);
  s.add("parallel.compress.rounding",
        "stochastic (unbiased, from a generator keyed by run.seed, the step, the bucket and the "
        "rank) or nearest.", &Cfg::parallel, &P::compress, &C::rounding)
      .one_of({"stochastic", "nearest"});
  s.add("parallel.compress.min_numel",
        "Tensors with fewer values, and every 1-D tensor (norms, biases) and router, are sent in "
        "f32: their bytes are few and their precision matters; the choice is logged once.",
        &Cfg::parallel, &P::compress, &C::min_numel).at_least(0);
  s.add("parallel.compress.check_replicas",
        "After each step, compare a CRC-32C of every dp replica's parameters and stop with an "
        "error naming the ranks when they differ.",
        &Cfg::parallel, &P::compress, &C::check_replicas);
}

void add_comm_keys(Schema<Cfg>& s) {
  s.add("comm.ranks_per_node",
        "Consecutive world ranks per node, for two-level compression and the simulated link on "
        "one machine; 0 takes the nodes from the hostnames.",
        &Cfg::comm, &CommConfig::ranks_per_node).at_least(0);
  s.add("comm.simulate_link.gbps",
        "Simulate an inter-node link of this many Gb/s per rank: every operation's bytes to or "
        "from other nodes hold its completion back by their transfer time (comm/simulated_link.h). "
        "0: off.", &Cfg::comm, &CommConfig::simulate_link, &SimulatedLinkConfig::gbps)
      .at_least(0.0);
  s.add("comm.simulate_link.latency_us",
        "The simulated link's latency per operation that crosses nodes.",
        &Cfg::comm, &CommConfig::simulate_link, &SimulatedLinkConfig::latency_us).at_least(0.0);
}

void add_optim_keys(Schema<Cfg>& s) {
  using O = OptimConfig;
  s.add("optim.name", "Optimizer.", &Cfg::optim, &O::name);
  s.add("optim.lr", "Peak learning rate, reached after warm-up.", &Cfg::optim, &O::lr)
      .above(0.0);
  s.add("optim.betas", "Moment decay rates [beta1, beta2].", &Cfg::optim, &O::betas)
      .length(2).at_least(0.0).below(1.0);
  s.add("optim.eps", "Denominator epsilon.", &Cfg::optim, &O::eps).above(0.0);
  s.add("optim.weight_decay", "Decoupled weight decay.", &Cfg::optim, &O::weight_decay)
      .at_least(0.0);
  s.add("optim.grad_clip", "Global gradient-norm clip; 0 disables clipping.", &Cfg::optim,
        &O::grad_clip).at_least(0.0);
  s.add("optim.schedule", "Learning-rate decay after warm-up.", &Cfg::optim, &O::schedule);
  s.add("optim.warmup_steps", "Steps of linear warm-up from 0 to optim.lr.", &Cfg::optim,
        &O::warmup_steps).at_least(0);
  s.add("optim.min_lr", "Learning rate at the end of the decay.", &Cfg::optim, &O::min_lr)
      .at_least(0.0);
  s.add("optim.spike_guard.enabled", "Skip updates whose loss or gradient norm spikes.",
        &Cfg::optim, &O::spike_guard, &SpikeGuardConfig::enabled);
  s.add("optim.spike_guard.window", "Accepted steps the spike guard's mean and deviation cover; "
        "it acts once the window is full.", &Cfg::optim, &O::spike_guard,
        &SpikeGuardConfig::window).at_least(2);
  s.add("optim.spike_guard.zscore", "Standard deviations above the window mean that count as a "
        "spike.", &Cfg::optim, &O::spike_guard, &SpikeGuardConfig::zscore).above(0.0);
}

void add_train_keys(Schema<Cfg>& s) {
  using T = TrainConfig;
  s.add("train.steps", "Optimizer steps to run.", &Cfg::train, &T::steps).at_least(1);
  s.add("train.global_batch", "Samples per step, over all data-parallel ranks.", &Cfg::train,
        &T::global_batch).at_least(1);
  s.add("train.micro_batch", "Samples per forward/backward pass on one rank.", &Cfg::train,
        &T::micro_batch).at_least(1);
  s.add("train.seq_len", "Tokens per sample; must equal the data plan's sequence length.",
        &Cfg::train, &T::seq_len).at_least(1);
  s.add("train.eval_every", "Steps between validation evaluations; 0 never evaluates.",
        &Cfg::train, &T::eval_every).at_least(0);
  s.add("train.eval_batches", "Global batches of the validation split each evaluation reads.",
        &Cfg::train, &T::eval_batches).at_least(1);
  s.add("train.log_every", "Steps between progress log lines.", &Cfg::train, &T::log_every)
      .at_least(1);
  s.add("train.mfu_peak_gflops", "Peak GFLOP/s of one rank for MFU; 0 measures the sgemm rate "
        "at start.", &Cfg::train, &T::mfu_peak_gflops).at_least(0.0);
  s.add("train.overlap_grad_reduce", "Start each gradient bucket's reduction during backward.",
        &Cfg::train, &T::overlap_grad_reduce);
  s.add("train.bucket_mb", "Gradient bucket size in MiB for the data-parallel reduction.",
        &Cfg::train, &T::bucket_mb).above(0.0);
  s.add("train.document_mask",
        "Document masking of packed samples: a token attends only to the tokens of its own "
        "document, documents ending at (and including) the end-of-document token (data.eod_id). "
        "Kept in checkpoints, so ms-infer serves the model the same way.",
        &Cfg::train, &T::document_mask);
  s.add("train.document_positions",
        "With train.document_mask: rotary positions restart at 0 at each document start "
        "instead of counting from the start of the sample.",
        &Cfg::train, &T::document_positions);
  s.add("train.device",
        "Where each rank trains: `cpu`, or `cuda` / `cuda:N` (the GPU of that ordinal, device 0 "
        "for `cuda`). A GPU run needs a build with CUDA (kernels/) and a visible device; the "
        "trainer refuses to start without one, naming what is missing.",
        &Cfg::train, &T::device).non_empty();
  s.add("train.precision",
        "Number format of the matmuls and attention. `f32`: fp32 everywhere. `bf16`: mixed "
        "precision: the linear layers and attention read bf16 (their inputs rounded to the "
        "nearest bf16) and accumulate in fp32; master weights, gradients, optimizer state, "
        "norms, activations and the loss stay fp32. On a GPU the matmuls run on the tensor "
        "cores; on the CPU the same rounding runs before fp32 BLAS, so a CPU run shows what "
        "bf16 does to the loss.",
        &Cfg::train, &T::precision);
}

void add_io_keys(Schema<Cfg>& s) {
  using C = CheckpointConfig;
  s.add("data.plan", "Mixture plan file written by `ms-data plan`.", &Cfg::data,
        &DataConfig::plan);
  s.add("data.eod_id",
        "End-of-document token id that train.document_mask splits samples at; -1 takes the one "
        "the plan's datasets record in their meta sidecars (`ms-data build` appends it after "
        "each document), or at inference the tokenizer's.", &Cfg::data, &DataConfig::eod_id)
      .at_least(-1);
  s.add("checkpoint.every", "Steps between checkpoints; 0 saves only at the end.",
        &Cfg::checkpoint, &C::every).at_least(0);
  s.add("checkpoint.async", "Write checkpoints in the background while training continues.",
        &Cfg::checkpoint, &C::async);
  s.add("checkpoint.keep", "Newest checkpoints to keep; 0 keeps all.", &Cfg::checkpoint,
        &C::keep).at_least(0);
  s.add("checkpoint.resume",
        "`auto` (the checkpoint run.dir/checkpoints/latest names, or else the newest complete "
        "one; none: start fresh), `none`, or a checkpoint path.",
        &Cfg::checkpoint, &C::resume).non_empty();
  s.add("checkpoint.max_write_mbps",
        "Cap on each rank's checkpoint write rate in MB/s, so an asynchronous save slows "
        "training less while it writes; 0 writes as fast as the disk allows.",
        &Cfg::checkpoint, &C::max_write_mbps).at_least(0.0);
  s.add("checkpoint.direct_io",
        "Write checkpoint data files with direct I/O, bypassing the page cache, where the "
        "filesystem has it; false writes through the page cache.",
        &Cfg::checkpoint, &C::direct_io);
  s.add("telemetry.every_s", "Seconds between host telemetry records.", &Cfg::telemetry,
        &TelemetryConfig::every_s).above(0.0);
  s.add("telemetry.trace", "Write per-rank traces of compute and collectives to run.dir/trace.",
        &Cfg::telemetry, &TelemetryConfig::trace);
  s.add("telemetry.watchdog_s",
        "Seconds a collective may wait before the watchdog writes run.dir/inflight/"
        "rank-NNNNN.json (what `ms-diagnose hang` and `supervise` read); 0: no watchdog.",
        &Cfg::telemetry, &TelemetryConfig::watchdog_s).at_least(0.0);
}

// Test-only fault injection; a "slot" is the rank's machine slot (DebugConfig).
void add_debug_keys(Schema<Cfg>& s) {
  using D = DebugConfig;
  s.add("debug.slow_rank", "Test-only: the slot that sleeps debug.slow_ms at the start of "
        "every step from debug.slow_from_step on (a slow machine); -1 for none.",
        &Cfg::debug, &D::slow_rank).at_least(-1);
  s.add("debug.slow_ms", "Test-only: milliseconds debug.slow_rank sleeps each step.",
        &Cfg::debug, &D::slow_ms).at_least(0.0);
  s.add("debug.slow_from_step", "Test-only: the first step debug.slow_rank is slow in.",
        &Cfg::debug, &D::slow_from_step).at_least(1);
  s.add("debug.kill_rank", "Test-only: the slot killed by SIGKILL at the start of "
        "debug.kill_step (a crashed machine); -1 for none.", &Cfg::debug, &D::kill_rank)
      .at_least(-1);
  s.add("debug.kill_step", "Test-only: the step debug.kill_rank dies in.", &Cfg::debug,
        &D::kill_step).at_least(1);
  s.add("debug.hang_rank", "Test-only: the slot that stops forever at the start of "
        "debug.hang_step, leaving its peers waiting in a collective (a hung machine); -1 for "
        "none.", &Cfg::debug, &D::hang_rank).at_least(-1);
  s.add("debug.hang_step", "Test-only: the step debug.hang_rank hangs in.", &Cfg::debug,
        &D::hang_step).at_least(1);
  s.add("debug.nan_rank", "Test-only: the slot whose training loss is NaN at debug.nan_step "
        "(a numerical fault); -1 for none.", &Cfg::debug, &D::nan_rank).at_least(-1);
  s.add("debug.nan_step", "Test-only: the step of the NaN loss.", &Cfg::debug, &D::nan_step)
      .at_least(1);
  s.add("debug.nan_repeat", "Test-only: false makes the NaN loss transient (once per run.dir, "
        "remembered in run.dir/debug/); true repeats it every time the step runs, as bad data "
        "or code would.", &Cfg::debug, &D::nan_repeat);
}

using IntOf = int64_t (*)(const Cfg&);

std::string value_of(std::string_view what, int64_t value) {
  return std::string(what) + " (" + std::to_string(value) + ")";
}

// Rule "`a` divisible by `b`"; `b` is at least 1 by the keys' own constraints.
void add_divisible_rule(Schema<Cfg>& s, std::string a, IntOf get_a, std::string b, IntOf get_b) {
  s.add_rule("`" + a + "` divisible by `" + b + "`",
             [a, get_a, b, get_b](const Cfg& c) -> std::optional<std::string> {
               if (get_a(c) % get_b(c) == 0) return std::nullopt;
               return value_of(a, get_a(c)) + " must be divisible by " + value_of(b, get_b(c));
             });
}

// Rule "`a` at most `b`".
void add_at_most_rule(Schema<Cfg>& s, std::string a, IntOf get_a, std::string b, IntOf get_b) {
  s.add_rule("`" + a + "` at most `" + b + "`",
             [a, get_a, b, get_b](const Cfg& c) -> std::optional<std::string> {
               if (get_a(c) <= get_b(c)) return std::nullopt;
               return value_of(a, get_a(c)) + " must not exceed " + value_of(b, get_b(c));
             });
}

// The product of the named factors, or nullopt when it does not fit int64_t; every factor is
// at least 1 by its key's own constraint (a factor below 1 leaves the product to that message).
std::optional<int64_t> product_of(const Cfg& c,
                                  const std::vector<std::pair<std::string, IntOf>>& factors) {
  int64_t product = 1;
  for (const auto& [name, get] : factors) {
    if (get(c) < 1) return 1;
    if (__builtin_mul_overflow(product, get(c), &product)) return std::nullopt;
  }
  return product;
}

// "parallel.pp * parallel.dp" and "(2 * 4)": the names and the values of a product, for messages
// that say which keys overflow without printing a wrapped number.
std::string product_text(const Cfg& c, const std::vector<std::pair<std::string, IntOf>>& factors) {
  std::string names, values;
  for (const auto& [name, get] : factors) {
    names += (names.empty() ? "" : " * ") + name;
    values += (values.empty() ? "" : " * ") + std::to_string(get(c));
  }
  return names + " (" + values + ")";
}

// Rule "`a` divisible by `f1 * f2 ...`", with the product checked: one that overflows 64 bits is
// reported as such, never wrapped.
void add_divisible_by_product_rule(Schema<Cfg>& s, std::string a, IntOf get_a,
                                   std::vector<std::pair<std::string, IntOf>> factors) {
  std::string names;
  for (const auto& f : factors) names += (names.empty() ? "" : " * ") + f.first;
  s.add_rule("`" + a + "` divisible by `" + names + "`",
             [a, get_a, factors, names](const Cfg& c) -> std::optional<std::string> {
               const std::optional<int64_t> product = product_of(c, factors);
               if (!product) return product_text(c, factors) + " overflows 64 bits";
               if (get_a(c) % *product == 0) return std::nullopt;
               return value_of(a, get_a(c)) + " must be divisible by " + value_of(names, *product);
             });
}

// Rule: a product of keys (the world, pp x vpp stages) at most `limit`, or the product is named
// as overflowing.
void add_product_at_most_rule(Schema<Cfg>& s, std::vector<std::pair<std::string, IntOf>> factors,
                              int64_t limit, std::string why) {
  std::string names;
  for (const auto& f : factors) names += (names.empty() ? "" : " * ") + f.first;
  s.add_rule("`" + names + "` at most " + std::to_string(limit) + " (" + why + ")",
             [factors, limit, why](const Cfg& c) -> std::optional<std::string> {
               const std::optional<int64_t> product = product_of(c, factors);
               if (!product) return product_text(c, factors) + " overflows 64 bits";
               if (*product <= limit) return std::nullopt;
               return product_text(c, factors) + " = " + std::to_string(*product) + " exceeds " +
                      std::to_string(limit) + " (" + why + ")";
             });
}

void add_model_rules(Schema<Cfg>& s) {
  add_divisible_rule(s, "model.n_heads", [](const Cfg& c) { return c.model.n_heads; },
                     "model.n_kv_heads", [](const Cfg& c) { return c.model.n_kv_heads; });
  add_divisible_rule(s, "model.d_model", [](const Cfg& c) { return c.model.d_model; },
                     "model.n_heads", [](const Cfg& c) { return c.model.n_heads; });
  s.add_rule("head size `model.d_model / model.n_heads` even (rotary embeddings rotate pairs)",
             [](const Cfg& c) -> std::optional<std::string> {
               const int64_t head = c.model.d_model / c.model.n_heads;
               // An uneven split is already reported by the divisibility rule.
               if (c.model.d_model % c.model.n_heads != 0 || head % 2 == 0) return std::nullopt;
               return "head size model.d_model / model.n_heads = " + std::to_string(head) +
                      " must be even for rotary embeddings";
             });
  s.add_rule("`model.moe.top_k` at most `model.moe.num_experts` when MoE is on",
             [](const Cfg& c) -> std::optional<std::string> {
               const MoeConfig& m = c.model.moe;
               if (m.num_experts == 0 || m.top_k <= m.num_experts) return std::nullopt;
               return value_of("model.moe.top_k", m.top_k) + " must not exceed " +
                      value_of("model.moe.num_experts", m.num_experts);
             });
  add_at_most_rule(s, "train.seq_len", [](const Cfg& c) { return c.train.seq_len; },
                   "model.max_seq_len", [](const Cfg& c) { return c.model.max_seq_len; });
  s.add_rule("`train.document_positions` only with `train.document_mask`",
             [](const Cfg& c) -> std::optional<std::string> {
               if (!c.train.document_positions || c.train.document_mask) return std::nullopt;
               return "train.document_positions restarts rotary positions at each document, "
                      "which needs train.document_mask: true (set both, or neither)";
             });
}

void add_parallel_rules(Schema<Cfg>& s) {
  add_divisible_rule(s, "model.n_heads", [](const Cfg& c) { return c.model.n_heads; },
                     "parallel.tp", [](const Cfg& c) { return c.parallel.tp; });
  add_divisible_rule(s, "model.n_kv_heads", [](const Cfg& c) { return c.model.n_kv_heads; },
                     "parallel.tp", [](const Cfg& c) { return c.parallel.tp; });
  add_divisible_rule(s, "model.d_ff", [](const Cfg& c) { return c.model.d_ff; },
                     "parallel.tp", [](const Cfg& c) { return c.parallel.tp; });
  s.add_rule("`model.moe.shared_expert_d_ff` divisible by `parallel.tp`",
             [](const Cfg& c) -> std::optional<std::string> {
               const int64_t f = c.model.moe.shared_expert_d_ff, tp = c.parallel.tp;
               if (f == 0 || tp < 1 || f % tp == 0) return std::nullopt;
               return value_of("model.moe.shared_expert_d_ff", f) + " must be divisible by " +
                      value_of("parallel.tp", tp);
             });
  add_at_most_rule(s, "parallel.pp", [](const Cfg& c) { return c.parallel.pp; },
                   "model.n_layers", [](const Cfg& c) { return c.model.n_layers; });
  add_divisible_by_product_rule(s, "train.seq_len", [](const Cfg& c) { return c.train.seq_len; },
                                {{"2", [](const Cfg&) { return int64_t{2}; }},
                                 {"parallel.cp", [](const Cfg& c) { return c.parallel.cp; }}});
  // MPI numbers ranks with an int: a larger world cannot be launched, and the mesh's rank
  // arithmetic (rank = ((pp * dp + d) * cp + c) * tp + t) must not overflow.
  add_product_at_most_rule(s,
                           {{"parallel.pp", [](const Cfg& c) { return c.parallel.pp; }},
                            {"parallel.dp", [](const Cfg& c) { return c.parallel.dp; }},
                            {"parallel.cp", [](const Cfg& c) { return c.parallel.cp; }},
                            {"parallel.tp", [](const Cfg& c) { return c.parallel.tp; }}},
                           kMaxWorldRanks, "the ranks MPI can number");
  add_product_at_most_rule(s,
                           {{"parallel.pp", [](const Cfg& c) { return c.parallel.pp; }},
                            {"parallel.vpp", [](const Cfg& c) { return c.parallel.vpp; }}},
                           kMaxWorldRanks, "the pipeline's stages are numbered with an int");
  s.add_rule("`parallel.ep` above 1 only with MoE, and `model.moe.num_experts` divisible by it",
             [](const Cfg& c) -> std::optional<std::string> {
               const int64_t ep = c.parallel.ep, experts = c.model.moe.num_experts;
               if (ep == 1 || (experts > 0 && experts % ep == 0)) return std::nullopt;
               if (experts == 0) {
                 return value_of("parallel.ep", ep) +
                        " needs MoE layers; set model.moe.num_experts or parallel.ep=1";
               }
               return value_of("model.moe.num_experts", experts) + " must be divisible by " +
                      value_of("parallel.ep", ep);
             });
  add_divisible_by_product_rule(
      s, "train.global_batch", [](const Cfg& c) { return c.train.global_batch; },
      {{"parallel.dp", [](const Cfg& c) { return c.parallel.dp; }},
       {"train.micro_batch", [](const Cfg& c) { return c.train.micro_batch; }}});
}

void add_compress_rules(Schema<Cfg>& s) {
  s.add_rule("`parallel.compress` only with `parallel.zero` 1",
             [](const Cfg& c) -> std::optional<std::string> {
               const CompressSettings& k = c.parallel.compress;
               if ((k.weights == "none" && k.grads == "none") || c.parallel.zero == 1) {
                 return std::nullopt;
               }
               return "parallel.compress.weights/grads compress ZeRO-1's reduce-scatter and "
                      "all-gather; set parallel.zero: 1 (got " +
                      std::to_string(c.parallel.zero) + ")";
             });
}

void add_device_rules(Schema<Cfg>& s) {
  s.add_rule("`train.device` names a device", [](const Cfg& c) -> std::optional<std::string> {
    const Result<Device> device = parse_device(c.train.device);
    if (device.ok()) return std::nullopt;
    return "train.device: " + device.status().message();
  });
}

void add_optim_rules(Schema<Cfg>& s) {
  s.add_rule("`optim.min_lr` at most `optim.lr`", [](const Cfg& c) -> std::optional<std::string> {
    if (c.optim.min_lr <= c.optim.lr) return std::nullopt;
    return "optim.min_lr (" + format_double(c.optim.min_lr) + ") must not exceed optim.lr (" +
           format_double(c.optim.lr) + ")";
  });
}

Schema<Cfg> build_run_config_schema() {
  Schema<Cfg> s;
  add_run_keys(s);
  add_model_keys(s);
  add_parallel_keys(s);
  add_compress_keys(s);
  add_optim_keys(s);
  add_train_keys(s);
  add_io_keys(s);
  add_comm_keys(s);
  add_debug_keys(s);
  add_model_rules(s);
  add_parallel_rules(s);
  add_compress_rules(s);
  add_optim_rules(s);
  add_device_rules(s);
  return s;
}

}  // namespace

std::span<const EnumName<OptimizerKind>> enum_names(OptimizerKind) { return kOptimizerNames; }
std::span<const EnumName<LrSchedule>> enum_names(LrSchedule) { return kScheduleNames; }
std::span<const EnumName<Recompute>> enum_names(Recompute) { return kRecomputeNames; }
std::span<const EnumName<Precision>> enum_names(Precision) { return kPrecisionNames; }

const Schema<RunConfig>& run_config_schema() {
  static const Schema<RunConfig> schema = build_run_config_schema();
  return schema;
}

Result<RunConfig> load_run_config(const std::string& path, const std::vector<std::string>& sets) {
  return run_config_schema().parse_file(path, sets);
}

Result<RunConfig> run_config_from_yaml_text(std::string_view text, std::string_view source_name,
                                            const std::vector<std::string>& sets) {
  return run_config_schema().parse_text(text, source_name, sets);
}

std::string dump_yaml(const RunConfig& config, bool describe) {
  return run_config_schema().dump(config, describe);
}

std::string help_text() { return run_config_schema().help(); }

std::string reference_markdown() { return run_config_schema().markdown(); }

}  // namespace ms::config
