// One fetch per tensor-parallel group: every rank of a tp group trains on the same micro-batches,
// so with loader ranks (parallel.loaders) only tp rank 0 asks its loader rank for them and
// broadcasts each over the tp group; the other ranks hold no loader channel. Without this each
// tp rank would fetch an identical copy, tp times the loader traffic.
//
// Every method that moves data (next) is collective over the tp group, called in the same
// order on every rank, as the trainer does. A failed fetch on tp rank 0 is broadcast too, so
// the other ranks return the same error instead of waiting.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/status.h"
#include "data/loader.h"

namespace ms::train {

class TpBroadcastSource : public data::BatchSource {
 public:
  // `source` is the real source on tp rank 0 and null elsewhere. Collective over `tp` (the
  // source's sizes and tokenizer path reach every rank); `tp` must outlive the object.
  static Result<std::unique_ptr<TpBroadcastSource>> create(
      comm::Communicator& tp, std::unique_ptr<data::BatchSource> source);

  Result<data::MicroBatch> next() override;
  // tp rank 0's state as of the last next() or restore() (every rank returns the same).
  data::LoaderState state() const override { return state_; }
  Status restore(const data::LoaderState& state) override;
  void reset() override;

  int64_t seq_len() const override { return seq_len_; }
  int32_t vocab_size() const override { return vocab_size_; }
  const std::string& tokenizer_path() const override { return tokenizer_path_; }
  int micro_batches_per_step() const override { return micro_per_step_; }
  int64_t samples_in_split() const override { return samples_; }
  // The real source on tp rank 0 (for the loader client's stop reports), null elsewhere.
  data::BatchSource* root_source() const { return source_.get(); }

 private:
  TpBroadcastSource(comm::Communicator& tp, std::unique_ptr<data::BatchSource> source)
      : tp_(tp), source_(std::move(source)) {}

  comm::Communicator& tp_;
  std::unique_ptr<data::BatchSource> source_;
  int64_t seq_len_ = 0;
  int32_t vocab_size_ = 0;
  std::string tokenizer_path_;
  int micro_per_step_ = 1;
  int64_t samples_ = 0;
  data::LoaderState state_;
};

}  // namespace ms::train
