// The GPU memory bandwidth probes; see bandwidth_rate.h. Host code over the CUDA runtime; the
// read uses the project's reduction kernel rather than a kernel of its own, so the figure is what
// the toolkit's own reads reach.
#include "kernels/bandwidth_rate.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>

#include "core/cuda_check.h"
#include "core/timer.h"
#include "kernels/device.h"
#include "kernels/reduce.cuh"

namespace ms::kernels {

namespace {

Status check_size(const char* what, size_t bytes) {
  if (bytes < sizeof(float)) {
    return InvalidArgument(std::string(what) + ": the buffer must hold at least 4 bytes, got " +
                           std::to_string(bytes));
  }
  return Status::OK();
}

// Best seconds of run() (which enqueues on the default stream) over `reps`, after one warm-up.
Result<double> best_seconds(int reps, const std::function<Status()>& run) {
  double best_s = 1e30;
  for (int rep = 0; rep <= std::max(reps, 1); ++rep) {
    Stopwatch watch;
    MS_RETURN_IF_ERROR(run());
    MS_RETURN_IF_ERROR(synchronize(nullptr));
    if (rep > 0) best_s = std::min(best_s, watch.elapsed_s());
  }
  return best_s;
}

// Page-locked host memory, so copies run at the link's speed (DMA, no staging); freed on
// destruction.
class PinnedBuffer {
 public:
  static Result<PinnedBuffer> allocate(size_t bytes) {
    void* ptr = nullptr;
    MS_CUDA_CHECK(cudaMallocHost(&ptr, bytes));
    std::fill_n(static_cast<char*>(ptr), bytes, char{1});  // touch every page before timing
    return PinnedBuffer(ptr);
  }
  PinnedBuffer(PinnedBuffer&& other) noexcept : ptr_(std::exchange(other.ptr_, nullptr)) {}
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  PinnedBuffer(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (ptr_) (void)cudaFreeHost(ptr_);
  }
  void* data() const { return ptr_; }

 private:
  explicit PinnedBuffer(void* ptr) : ptr_(ptr) {}
  void* ptr_;
};

Result<double> measure_host_copy(size_t bytes, int reps, cudaMemcpyKind kind, const char* what) {
  MS_RETURN_IF_ERROR(check_size(what, bytes));
  MS_ASSIGN_OR_RETURN(DeviceBuffer device, DeviceBuffer::allocate(bytes));
  MS_ASSIGN_OR_RETURN(PinnedBuffer host, PinnedBuffer::allocate(bytes));
  void* dst = kind == cudaMemcpyHostToDevice ? device.data() : host.data();
  const void* src = kind == cudaMemcpyHostToDevice ? host.data() : device.data();
  MS_ASSIGN_OR_RETURN(const double seconds, best_seconds(reps, [&]() -> Status {
                        MS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, nullptr));
                        return Status::OK();
                      }));
  return static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace

Result<double> measure_device_read_gbs(size_t bytes, int reps) {
  MS_RETURN_IF_ERROR(check_size("device read bandwidth", bytes));
  const size_t n = bytes / sizeof(float);
  MS_ASSIGN_OR_RETURN(DeviceBuffer x, DeviceBuffer::allocate(n * sizeof(float)));
  MS_ASSIGN_OR_RETURN(DeviceBuffer out, DeviceBuffer::allocate(sizeof(float)));
  MS_CUDA_CHECK(cudaMemset(x.data(), 0, n * sizeof(float)));
  MS_ASSIGN_OR_RETURN(const double seconds, best_seconds(reps, [&] {
                        return sum(x.as<float>(), n, out.as<float>());
                      }));
  return static_cast<double>(n * sizeof(float)) / seconds / 1e9;
}

Result<double> measure_device_copy_gbs(size_t bytes, int reps) {
  MS_RETURN_IF_ERROR(check_size("device copy bandwidth", bytes));
  MS_ASSIGN_OR_RETURN(DeviceBuffer src, DeviceBuffer::allocate(bytes));
  MS_ASSIGN_OR_RETURN(DeviceBuffer dst, DeviceBuffer::allocate(bytes));
  MS_CUDA_CHECK(cudaMemset(src.data(), 0, bytes));
  MS_ASSIGN_OR_RETURN(const double seconds, best_seconds(reps, [&] {
                        return copy_on_device(dst.data(), src.data(), bytes);
                      }));
  return 2.0 * static_cast<double>(bytes) / seconds / 1e9;
}

Result<double> measure_host_to_device_gbs(size_t bytes, int reps) {
  return measure_host_copy(bytes, reps, cudaMemcpyHostToDevice, "host-to-device bandwidth");
}

Result<double> measure_device_to_host_gbs(size_t bytes, int reps) {
  return measure_host_copy(bytes, reps, cudaMemcpyDeviceToHost, "device-to-host bandwidth");
}

}  // namespace ms::kernels
