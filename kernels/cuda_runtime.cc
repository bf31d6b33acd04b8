#include "kernels/cuda_runtime.h"

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "core/range_arena.h"

namespace ms::kernels {
namespace {

// Events are recycled round robin: an Event handed out stays valid until this many later
// records, far more than any caller keeps in flight (one per bucket or micro-batch).
constexpr size_t kEventPool = 4096;

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

class ArenaAllocator final : public Allocator {
 public:
  explicit ArenaAllocator(CudaRuntime::State& state) : state_(state) {}
  Device device() const override;
  Result<Buffer> allocate(size_t bytes, const Stream& stream) override;

 private:
  CudaRuntime::State& state_;
};

struct CudaRuntime::State {
  int ordinal = 0;
  std::string description;
  cudaStream_t stream = nullptr;
  void* base = nullptr;
  std::unique_ptr<RangeArena> arena;
  std::mutex mutex;                       // guards arena, streams and pending
  std::map<size_t, cudaStream_t> streams;  // offset -> stream of blocks not on `stream`
  std::vector<std::pair<size_t, cudaEvent_t>> pending;  // freed, waiting for their stream
  std::array<cudaEvent_t, kEventPool> events{};
  size_t next_event = 0;
  ArenaAllocator allocator{*this};

  Device device() const { return Device::cuda(ordinal); }

  // Blocks whose other-stream work has completed go back to the arena. Called with the mutex.
  void reclaim() {
    for (size_t i = 0; i < pending.size();) {
      if (cudaEventQuery(pending[i].second) == cudaSuccess) {
        arena->release(pending[i].first);
        cudaEventDestroy(pending[i].second);
        pending[i] = pending.back();
        pending.pop_back();
      } else {
        ++i;
      }
    }
    (void)cudaGetLastError();  // cudaErrorNotReady from the queries is not an error
  }

  static void release(void* context, void* data, size_t) {
    auto& s = *static_cast<State*>(context);
    const size_t offset = static_cast<size_t>(static_cast<char*>(data) - static_cast<char*>(s.base));
    std::lock_guard<std::mutex> lock(s.mutex);
    const auto other = s.streams.find(offset);
    if (other == s.streams.end()) {
      s.arena->release(offset);
      return;
    }
    cudaEvent_t done = nullptr;
    if (cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess &&
        cudaEventRecord(done, other->second) == cudaSuccess) {
      s.pending.emplace_back(offset, done);
    } else {
      // No event to wait on: wait for the stream itself rather than risk reuse under it.
      (void)cudaStreamSynchronize(other->second);
      if (done != nullptr) cudaEventDestroy(done);
      s.arena->release(offset);
    }
    s.streams.erase(other);
  }
};

Device ArenaAllocator::device() const { return state_.device(); }

Result<Buffer> ArenaAllocator::allocate(size_t bytes, const Stream& stream) {
  if (stream.device != state_.device()) {
    return InvalidArgument("allocation on " + device_name(state_.device()) + " for a stream of " +
                           device_name(stream.device));
  }
  std::lock_guard<std::mutex> lock(state_.mutex);
  std::optional<size_t> offset = state_.arena->allocate(bytes);
  if (!offset && !state_.pending.empty()) {
    state_.reclaim();
    offset = state_.arena->allocate(bytes);
  }
  if (!offset) {
    return Unavailable(device_name(state_.device()) + " is out of arena memory allocating " +
                       mib(bytes) + ": " + state_.arena->describe() +
                       "; a smaller micro-batch, parallel.recompute or more model parallelism "
                       "lowers the need");
  }
  const auto handle = static_cast<cudaStream_t>(stream.handle);
  if (handle != state_.stream) state_.streams[*offset] = handle;
  return Buffer::adopt(static_cast<char*>(state_.base) + *offset, bytes, state_.device(),
                       Buffer::Release{&CudaRuntime::State::release, &state_},
                       RangeArena::kDefaultAlignment);
}

Result<std::unique_ptr<CudaRuntime>> CudaRuntime::create(const CudaRuntimeOptions& options) {
  int count = 0;
  const cudaError_t counted = cudaGetDeviceCount(&count);
  if (counted != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable("no CUDA device is usable: " + cuda_error_detail(counted));
  }
  if (options.ordinal < 0 || options.ordinal >= count) {
    return Unavailable("CUDA device " + std::to_string(options.ordinal) + " does not exist: " +
                       std::to_string(count) + " device(s) are visible");
  }
  auto state = std::make_unique<State>();
  state->ordinal = options.ordinal;
  MS_CUDA_CHECK(cudaSetDevice(options.ordinal));
  cudaDeviceProp properties{};
  MS_CUDA_CHECK(cudaGetDeviceProperties(&properties, options.ordinal));
  size_t free_bytes = 0, total_bytes = 0;
  MS_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB", static_cast<double>(total_bytes) / (1ull << 30));
  state->description = std::string(properties.name) + " (cuda:" + std::to_string(options.ordinal) +
                       ", sm_" + std::to_string(properties.major) +
                       std::to_string(properties.minor) + ", " + memory + ")";
  const size_t want = options.arena_bytes != 0
                          ? options.arena_bytes
                          : static_cast<size_t>(options.fraction * static_cast<double>(free_bytes));
  if (want > free_bytes) {
    return Unavailable(state->description + ": the arena needs " + mib(want) + " but " +
                       mib(free_bytes) + " are free");
  }
  const cudaError_t reserved = cudaMalloc(&state->base, want);
  if (reserved != cudaSuccess) {
    (void)cudaGetLastError();
    return Unavailable(state->description + ": reserving the " + mib(want) + " arena failed (" +
                       mib(free_bytes) + " free): " + cuda_error_detail(reserved));
  }
  state->arena = std::make_unique<RangeArena>(want);
  MS_CUDA_CHECK(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
  // Some kernels take their small per-call workspaces (reduction partials) from the device's
  // stream-ordered pool; keeping what it frees instead of returning it to the driver at each
  // synchronisation makes those reuse memory, not call the driver, from step to step.
  cudaMemPool_t pool = nullptr;
  MS_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, options.ordinal));
  uint64_t keep = UINT64_MAX;
  MS_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  return std::unique_ptr<CudaRuntime>(new CudaRuntime(std::move(state)));
}

CudaRuntime::CudaRuntime(std::unique_ptr<State> state) : state_(std::move(state)) {}

CudaRuntime::~CudaRuntime() {
  // Tensors still alive would free into a released arena: everything from this runtime must be
  // gone first (the owner destroys the model and the optimizer before the runtime).
  (void)cudaSetDevice(state_->ordinal);
  (void)cudaStreamSynchronize(state_->stream);
  for (auto& [offset, event] : state_->pending) cudaEventDestroy(event);
  for (cudaEvent_t event : state_->events) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  cudaStreamDestroy(state_->stream);
  cudaFree(state_->base);
}

Device CudaRuntime::device() const { return state_->device(); }
Allocator& CudaRuntime::allocator() { return state_->allocator; }
Stream CudaRuntime::default_stream() const { return Stream{state_->device(), state_->stream}; }
const std::string& CudaRuntime::description() const { return state_->description; }

Result<Event> CudaRuntime::record(const Stream& stream) {
  if (stream.device != device()) return InvalidArgument("record on a stream of another device");
  std::lock_guard<std::mutex> lock(state_->mutex);
  cudaEvent_t& event = state_->events[state_->next_event];
  state_->next_event = (state_->next_event + 1) % kEventPool;
  if (event == nullptr) MS_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  MS_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream.handle)));
  return Event{device(), event};
}

Status CudaRuntime::wait(const Stream& stream, const Event& event) {
  if (stream.device != device()) return InvalidArgument("wait on a stream of another device");
  if (event.device.is_host()) return Status::OK();  // host work is done when issued
  if (event.device != device()) return InvalidArgument("wait for an event of another device");
  MS_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.handle),
                                    static_cast<cudaEvent_t>(event.handle), 0));
  return Status::OK();
}

Status CudaRuntime::synchronize(const Stream& stream) {
  if (stream.device != device()) return InvalidArgument("synchronize a stream of another device");
  MS_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream.handle)));
  return Status::OK();
}

Status CudaRuntime::copy(Tensor& dst, const Tensor& src, const Stream& stream) {
  if (stream.device != device()) return InvalidArgument("copy on a stream of another device");
  for (const Tensor* t : {static_cast<const Tensor*>(&dst), &src}) {
    if (!t->device().is_host() && t->device() != device()) {
      return InvalidArgument("copy " + t->describe() + ": it is on " + device_name(t->device()) +
                             ", this runtime is " + device_name(device()));
    }
  }
  if (dst.dtype() != src.dtype() || dst.numel() != src.numel()) {
    return InvalidArgument("copy " + src.describe() + " into " + dst.describe() +
                           ": the dtypes and element counts must match");
  }
  if (src.nbytes() == 0) return Status::OK();
  // Unified addressing tells the direction; a copy from pageable host memory is staged before
  // the call returns and one to pageable host memory is complete when it returns.
  MS_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), src.nbytes(), cudaMemcpyDefault,
                                static_cast<cudaStream_t>(stream.handle)));
  return Status::OK();
}

ArenaUsage CudaRuntime::usage() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return {state_->arena->capacity(), state_->arena->in_use(), state_->arena->peak()};
}

}  // namespace ms::kernels
