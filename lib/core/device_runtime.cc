#include "core/device_runtime.h"

#include <cstring>
#include <string>
#include <utility>

#include "core/checked_math.h"

namespace ms {
namespace {

Status check_on(const Device& expected, const Device& got, const char* what) {
  if (got == expected) return Status::OK();
  return InvalidArgument(std::string(what) + " is on " + device_name(got) + ", not " +
                         device_name(expected));
}

class HostAllocator final : public Allocator {
 public:
  Device device() const override { return Device::host(); }
  Result<Buffer> allocate(size_t bytes, const Stream& stream) override {
    MS_RETURN_IF_ERROR(check_on(Device::host(), stream.device, "the allocation's stream"));
    return Buffer::allocate(bytes);
  }
};

// Host work runs on the calling thread when it is issued: a stream is always idle and an
// event complete, so ordering costs nothing here and the callers' record/wait pairs are the
// ones a CUDA stream needs.
class HostRuntime final : public DeviceRuntime {
 public:
  Device device() const override { return Device::host(); }
  Allocator& allocator() override { return allocator_; }
  Stream default_stream() const override { return Stream{}; }
  Result<Event> record(const Stream& stream) override {
    MS_RETURN_IF_ERROR(check_on(Device::host(), stream.device, "the stream"));
    return Event{};
  }
  Status wait(const Stream& stream, const Event& event) override {
    MS_RETURN_IF_ERROR(check_on(Device::host(), stream.device, "the stream"));
    return check_on(Device::host(), event.device, "the event");
  }
  Status synchronize(const Stream& stream) override {
    return check_on(Device::host(), stream.device, "the stream");
  }
  Status copy(Tensor& dst, const Tensor& src, const Stream& stream) override {
    MS_RETURN_IF_ERROR(check_on(Device::host(), stream.device, "the stream"));
    MS_RETURN_IF_ERROR(check_on(Device::host(), dst.device(), "the copy's destination"));
    MS_RETURN_IF_ERROR(check_on(Device::host(), src.device(), "the copy's source"));
    if (dst.dtype() != src.dtype() || dst.numel() != src.numel()) {
      return InvalidArgument("copy " + src.describe() + " into " + dst.describe() +
                             ": the dtypes and element counts must match");
    }
    if (src.nbytes() != 0) std::memmove(dst.raw_data(), src.raw_data(), src.nbytes());
    return Status::OK();
  }

 private:
  HostAllocator allocator_;
};

}  // namespace

DeviceRuntime& host_runtime() {
  static HostRuntime runtime;
  return runtime;
}

Result<Tensor> empty_tensor(Allocator& allocator, DType dtype, std::vector<int64_t> shape,
                            const Stream& stream) {
  MS_ASSIGN_OR_RETURN(const uint64_t bytes,
                      checked_nbytes(shape, dtype_size(dtype), "tensor of " +
                                                                  std::string(dtype_name(dtype))));
  MS_ASSIGN_OR_RETURN(Buffer buffer, allocator.allocate(static_cast<size_t>(bytes), stream));
  return Tensor::from_buffer(dtype, std::move(shape), std::move(buffer));
}

}  // namespace ms
