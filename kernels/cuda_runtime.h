// The device seam's runtime for one CUDA device (core/device_runtime.h): one arena of device
// memory reserved at start and carved by core/range_arena.h, so a step never calls cudaMalloc;
// one non-blocking compute stream; events from a reused pool; copies in any direction through
// cudaMemcpyAsync. Plain C++ (no CUDA types), so cmd/ and lib/train can hold one.
//
// Stream-ordered reuse: memory freed by work on the compute stream is reusable at once by later
// work on that stream (the next kernel cannot start before the last one that read it). Memory
// allocated for another stream (communication) is held back until an event recorded on that
// stream at the free has completed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/device_runtime.h"
#include "core/status.h"

namespace ms::kernels {

struct CudaRuntimeOptions {
  int ordinal = 0;
  // Bytes to reserve for the arena; 0 takes `fraction` of the device's free memory at start.
  size_t arena_bytes = 0;
  double fraction = 0.9;
};

// The arena's accounting, for telemetry and out-of-memory messages.
struct ArenaUsage {
  size_t capacity = 0;
  size_t in_use = 0;
  size_t peak = 0;
};

class CudaRuntime final : public DeviceRuntime {
 public:
  // Selects the device, creates the stream and reserves the arena. kUnavailable with the
  // runtime's reason when there is no device or driver; kUnavailable naming the sizes when the
  // arena cannot be reserved.
  static Result<std::unique_ptr<CudaRuntime>> create(const CudaRuntimeOptions& options);
  ~CudaRuntime() override;
  CudaRuntime(const CudaRuntime&) = delete;
  CudaRuntime& operator=(const CudaRuntime&) = delete;

  Device device() const override;
  Allocator& allocator() override;
  Stream default_stream() const override;
  Result<Event> record(const Stream& stream) override;
  Status wait(const Stream& stream, const Event& event) override;
  Status synchronize(const Stream& stream) override;
  Status copy(Tensor& dst, const Tensor& src, const Stream& stream) override;

  ArenaUsage usage() const;
  // "NVIDIA H100 80GB HBM3 (cuda:0, sm_90, 79.1 GiB)".
  const std::string& description() const;

  struct State;

 private:
  explicit CudaRuntime(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace ms::kernels
