// One fetch per tp group (tp_batch_source.h).
#include "train/tp_batch_source.h"

#include <cstring>

#include "comm/variable_length.h"

namespace ms::train {

Result<std::unique_ptr<TpBroadcastSource>> TpBroadcastSource::create(
    comm::Communicator& tp, std::unique_ptr<data::BatchSource> source) {
  if ((tp.rank() == 0) != (source != nullptr)) {
    return InvalidArgument("TpBroadcastSource needs the real source on tp rank 0 only");
  }
  std::unique_ptr<TpBroadcastSource> s(new TpBroadcastSource(tp, std::move(source)));
  int64_t sizes[4] = {0, 0, 0, 0};
  if (s->source_) {
    sizes[0] = s->source_->seq_len();
    sizes[1] = s->source_->vocab_size();
    sizes[2] = s->source_->micro_batches_per_step();
    sizes[3] = s->source_->samples_in_split();
    s->tokenizer_path_ = s->source_->tokenizer_path();
    s->state_ = s->source_->state();
  }
  MS_RETURN_IF_ERROR(tp.broadcast(sizes, 4, DType::kI64, 0));
  MS_RETURN_IF_ERROR(comm::broadcast_variable(tp, s->tokenizer_path_, 0));
  MS_RETURN_IF_ERROR(comm::broadcast_variable(tp, s->state_.plan_hash, 0));
  MS_RETURN_IF_ERROR(tp.broadcast(&s->state_.consumed_samples, 1, DType::kI64, 0));
  s->seq_len_ = sizes[0];
  s->vocab_size_ = static_cast<int32_t>(sizes[1]);
  s->micro_per_step_ = static_cast<int>(sizes[2]);
  s->samples_ = sizes[3];
  return s;
}

Result<data::MicroBatch> TpBroadcastSource::next() {
  data::MicroBatch batch;
  Status fetched = Status::OK();
  // Header: status code, step, micro index, rows, seq_len, consumed samples after the fetch.
  int64_t header[6] = {0, 0, 0, 0, 0, 0};
  std::string message;
  if (source_) {
    Result<data::MicroBatch> got = source_->next();
    if (got.ok()) {
      batch = std::move(*got);
      header[1] = batch.step;
      header[2] = batch.micro_index;
      header[3] = batch.rows;
      header[4] = batch.seq_len;
      state_ = source_->state();
      header[5] = state_.consumed_samples;
    } else {
      fetched = got.status();
      header[0] = static_cast<int64_t>(fetched.code());
      message = fetched.message();
    }
  }
  MS_RETURN_IF_ERROR(tp_.broadcast(header, 6, DType::kI64, 0));
  if (header[0] != 0) {
    MS_RETURN_IF_ERROR(comm::broadcast_variable(tp_, message, 0));
    if (source_) return fetched;
    return Status(static_cast<StatusCode>(header[0]),
                  message + " (from tp rank 0, which fetches this tp group's batches)");
  }
  if (!source_) {
    batch.step = header[1];
    batch.micro_index = static_cast<int>(header[2]);
    batch.rows = header[3];
    batch.seq_len = header[4];
    state_.consumed_samples = header[5];
    const size_t n = static_cast<size_t>(batch.rows * batch.seq_len);
    batch.inputs.resize(n);
    batch.targets.resize(n);
  }
  const size_t n = batch.inputs.size();
  MS_RETURN_IF_ERROR(tp_.broadcast(batch.inputs.data(), n, DType::kI32, 0));
  MS_RETURN_IF_ERROR(tp_.broadcast(batch.targets.data(), n, DType::kI32, 0));
  return batch;
}

Status TpBroadcastSource::restore(const data::LoaderState& state) {
  // Every rank restores the same checkpointed state; only tp rank 0 has a loader to move.
  state_ = state;
  return source_ ? source_->restore(state) : Status::OK();
}

void TpBroadcastSource::reset() {
  if (source_) {
    source_->reset();
    state_ = source_->state();
  }
}

}  // namespace ms::train
