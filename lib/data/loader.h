// Loader: turns a mixture plan (lib/data/plan.h) into the micro-batches one data-parallel rank
// trains on. The global sample sequence depends only on the plan, and data-parallel rank r of
// R takes the contiguous block [r*G/R, (r+1)*G/R) of every step's G global samples, so changing
// R keeps each global batch's content. The state is tiny (plan hash + consumed global samples)
// and resuming from it yields exactly the samples an uninterrupted run would see.
//
// BatchSource is the surface a trainer consumes; Loader (local, reads the datasets itself) and
// DisaggregatedLoaderClient (lib/data/disaggregated.h, receives ready batches over MPI from a
// loader rank) both implement it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ms::data {

enum class Split { kTrain, kValidation };

// "train" / "validation".
std::string_view split_name(Split split);
// Accepts "train", "validation" (and "val"); InvalidArgument otherwise.
Result<Split> parse_split(std::string_view name);

struct LoaderOptions {
  std::string plan_path;
  Split split = Split::kTrain;
  int64_t global_batch = 0;  // G: global samples per step
  int64_t micro_batch = 0;   // rows per micro-batch of one rank
  int dp_rank = 0;
  int dp_size = 1;
  int prefetch = 2;  // micro-batches built ahead by the background thread (0: build on demand)
};

// One micro-batch of this rank: inputs and targets are row-major (rows, seq_len) int32; a
// packed sample has seq_len + 1 tokens, inputs are its first seq_len and targets its last
// seq_len (inputs shifted by one).
struct MicroBatch {
  int64_t step = 0;      // global step this micro-batch belongs to (counted from sample 0)
  int micro_index = 0;   // index within this rank's micro-batches of the step
  int64_t rows = 0;
  int64_t seq_len = 0;
  std::vector<int32_t> inputs;
  std::vector<int32_t> targets;
};

// Everything a checkpoint needs to resume the data stream: the plan's hash and the number of
// global samples consumed, always at a step boundary (a multiple of global_batch).
struct LoaderState {
  std::string plan_hash;
  int64_t consumed_samples = 0;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  // The next micro-batch of this rank. The train split wraps around to its first sample when
  // it runs out (another epoch over the plan); the validation split wraps as well, so callers
  // evaluating a fixed pass use samples_in_split() and reset().
  virtual Result<MicroBatch> next() = 0;
  // Position after the last complete step returned by next().
  virtual LoaderState state() const = 0;
  // Continues from `state`; refuses a state whose plan hash differs from this plan's, or whose
  // consumed_samples is not a multiple of global_batch.
  virtual Status restore(const LoaderState& state) = 0;
  // Back to global sample 0 (for repeated validation passes). A failure to reach a remote
  // loader is reported by the following next().
  virtual void reset() = 0;

  virtual int64_t seq_len() const = 0;
  virtual int32_t vocab_size() const = 0;                 // from the datasets' meta (0: unknown)
  virtual const std::string& tokenizer_path() const = 0;  // from the datasets' meta ("" unknown)
  virtual int micro_batches_per_step() const = 0;         // global_batch / (dp_size * micro_batch)
  virtual int64_t samples_in_split() const = 0;
};

class Loader : public BatchSource {
 public:
  // Opens the plan, checks it (magic, version, crc), opens every source dataset and checks its
  // content hash against the one recorded at planning time (FailedPrecondition naming the
  // source when a dataset changed), and checks global_batch % (dp_size * micro_batch) == 0.
  // Starts the prefetch thread when options.prefetch > 0.
  static Result<std::unique_ptr<Loader>> open(const LoaderOptions& options);
  ~Loader() override;

  Result<MicroBatch> next() override;
  LoaderState state() const override;
  Status restore(const LoaderState& state) override;
  void reset() override;

  int64_t seq_len() const override;
  int32_t vocab_size() const override;
  const std::string& tokenizer_path() const override;
  int micro_batches_per_step() const override;
  int64_t samples_in_split() const override;

  const std::string& plan_hash() const;
  int64_t global_batch() const;

  struct Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ms::data
