// The local Loader: a PlanSampleReader plus a background thread that builds this rank's
// micro-batches ahead of the trainer into a bounded queue. Positions are counted in this rank's
// micro-batches since global sample 0 (u = step * micro_batches_per_step + micro_index), so
// state, restore and reset are plain arithmetic and the produced data depends only on u.
#include "data/loader.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "data/plan.h"
#include "data/plan_samples.h"

namespace ms::data {

std::string_view split_name(Split split) {
  return split == Split::kTrain ? "train" : "validation";
}

Result<Split> parse_split(std::string_view name) {
  if (name == "train") return Split::kTrain;
  if (name == "validation" || name == "val") return Split::kValidation;
  return InvalidArgument("unknown split '" + std::string(name) + "'; use train or validation");
}

struct Loader::Impl {
  LoaderOptions options;
  std::unique_ptr<PlanSampleReader> reader;
  int micro_per_step = 1;
  int64_t rank_rows_per_step = 0;  // G / R

  int64_t next_to_return = 0;  // consumer position (micro-batch counter u)

  std::mutex mu;
  std::condition_variable cv;
  struct Built {
    Status status;
    MicroBatch batch;
  };
  std::deque<Built> queue;
  int64_t next_to_build = 0;  // producer position
  bool stop = false;
  std::thread worker;

  // Micro-batch u of this rank: rows of the global samples
  // step*G + r*G/R + micro*mb + [0, mb), taken modulo the split's size (epochs over the plan).
  Result<MicroBatch> build(int64_t u) const {
    const int64_t seq_len = reader->seq_len();
    const int64_t samples = reader->samples();
    MicroBatch batch;
    batch.step = u / micro_per_step;
    batch.micro_index = static_cast<int>(u % micro_per_step);
    batch.rows = options.micro_batch;
    batch.seq_len = seq_len;
    batch.inputs.resize(batch.rows * seq_len);
    batch.targets.resize(batch.rows * seq_len);
    const int64_t first = batch.step * options.global_batch + options.dp_rank * rank_rows_per_step +
                          batch.micro_index * options.micro_batch;
    std::vector<int32_t> tokens(seq_len + 1);
    for (int64_t row = 0; row < batch.rows; ++row) {
      MS_RETURN_IF_ERROR(reader->read((first + row) % samples, tokens));
      std::copy(tokens.begin(), tokens.end() - 1, batch.inputs.begin() + row * seq_len);
      std::copy(tokens.begin() + 1, tokens.end(), batch.targets.begin() + row * seq_len);
    }
    return batch;
  }

  void produce() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [&] { return stop || static_cast<int>(queue.size()) < options.prefetch; });
      if (stop) return;
      const int64_t u = next_to_build++;
      lock.unlock();
      Result<MicroBatch> batch = build(u);
      lock.lock();
      if (stop) return;
      const bool failed = !batch.ok();
      queue.push_back(failed ? Built{batch.status(), {}} : Built{Status::OK(), std::move(batch).value()});
      cv.notify_all();
      if (failed) return;
    }
  }

  void start(int64_t position) {
    next_to_return = position;
    next_to_build = position;
    stop = false;
    queue.clear();
    if (options.prefetch > 0 && reader->samples() > 0) worker = std::thread([this] { produce(); });
  }

  void halt() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
    queue.clear();
  }

  Result<MicroBatch> take() {
    if (options.prefetch == 0) return build(next_to_return++);
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return !queue.empty(); });
    // A failed build stays at the front (the worker stopped after it), so every later call
    // reports the same error until restore() or reset() restarts the worker.
    if (!queue.front().status.ok()) return queue.front().status;
    Built built = std::move(queue.front());
    queue.pop_front();
    cv.notify_all();
    ++next_to_return;
    return std::move(built.batch);
  }
};

namespace {

Status check_options(const LoaderOptions& o) {
  if (o.global_batch < 1 || o.micro_batch < 1 || o.dp_size < 1 || o.prefetch < 0) {
    return InvalidArgument("loader needs global_batch >= 1, micro_batch >= 1, dp_size >= 1 and "
                           "prefetch >= 0 (got " + std::to_string(o.global_batch) + ", " +
                           std::to_string(o.micro_batch) + ", " + std::to_string(o.dp_size) +
                           ", " + std::to_string(o.prefetch) + ")");
  }
  if (o.dp_rank < 0 || o.dp_rank >= o.dp_size) {
    return InvalidArgument("loader dp_rank " + std::to_string(o.dp_rank) + " is outside [0, " +
                           std::to_string(o.dp_size) + ")");
  }
  if (o.global_batch % (o.dp_size * o.micro_batch) != 0) {
    return InvalidArgument("global_batch (" + std::to_string(o.global_batch) +
                           ") must be divisible by dp_size * micro_batch (" +
                           std::to_string(o.dp_size) + " * " + std::to_string(o.micro_batch) + ")");
  }
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<Loader>> Loader::open(const LoaderOptions& options) {
  MS_RETURN_IF_ERROR(check_options(options));
  MS_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, Plan::open(options.plan_path));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  MS_ASSIGN_OR_RETURN(impl->reader, PlanSampleReader::open(std::move(plan), options.split));
  impl->rank_rows_per_step = options.global_batch / options.dp_size;
  impl->micro_per_step = static_cast<int>(impl->rank_rows_per_step / options.micro_batch);
  impl->start(0);
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() { impl_->halt(); }

Result<MicroBatch> Loader::next() {
  if (impl_->reader->samples() == 0) {
    return FailedPrecondition("plan '" + impl_->reader->plan().path() + "' has no " +
                              std::string(split_name(impl_->options.split)) +
                              " samples (see validation.fraction in the mixture)");
  }
  return impl_->take();
}

LoaderState Loader::state() const {
  const int64_t steps = impl_->next_to_return / impl_->micro_per_step;
  return LoaderState{plan_hash(), steps * impl_->options.global_batch};
}

Status Loader::restore(const LoaderState& state) {
  if (state.plan_hash != plan_hash()) {
    return FailedPrecondition("loader state is for plan " + state.plan_hash + ", but '" +
                              impl_->reader->plan().path() + "' has hash " + plan_hash() +
                              "; resume with the plan the checkpoint was trained on");
  }
  if (state.consumed_samples < 0 || state.consumed_samples % impl_->options.global_batch != 0) {
    return InvalidArgument("loader state consumed_samples " + std::to_string(state.consumed_samples) +
                           " is not a multiple of global_batch " +
                           std::to_string(impl_->options.global_batch));
  }
  impl_->halt();
  impl_->start(state.consumed_samples / impl_->options.global_batch * impl_->micro_per_step);
  return Status::OK();
}

void Loader::reset() {
  impl_->halt();
  impl_->start(0);
}

int64_t Loader::seq_len() const { return impl_->reader->seq_len(); }
int32_t Loader::vocab_size() const { return impl_->reader->vocab_size(); }
const std::string& Loader::tokenizer_path() const { return impl_->reader->tokenizer_path(); }
int Loader::micro_batches_per_step() const { return impl_->micro_per_step; }
int64_t Loader::samples_in_split() const { return impl_->reader->samples(); }
const std::string& Loader::plan_hash() const { return impl_->reader->plan().hash(); }
int64_t Loader::global_batch() const { return impl_->options.global_batch; }

}  // namespace ms::data
