// The device seam's core half: device names, buffers that own another allocator's memory (as a
// CUDA arena's will), tensors that carry their device, and the host runtime's allocation,
// ordering and copies, including the refusals that keep host code off device memory.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer.h"
#include "core/device.h"
#include "core/device_runtime.h"
#include "core/tensor.h"

namespace ms {
namespace {

TEST(Device, NamesParseBack) {
  for (const Device d : {Device::host(), Device::cuda(0), Device::cuda(7)}) {
    const Result<Device> parsed = parse_device(device_name(d));
    ASSERT_TRUE(parsed.ok()) << device_name(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_EQ(device_name(Device::host()), "cpu");
  EXPECT_EQ(device_name(Device::cuda(3)), "cuda:3");
  EXPECT_EQ(*parse_device("cuda"), Device::cuda(0));
}

TEST(Device, RefusesWhatIsNotADeviceNamingTheForms) {
  for (const char* bad : {"", "gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda: 1", "cuda1"}) {
    const Result<Device> parsed = parse_device(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "'";
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(parsed.status().message().find("expected cpu, cuda or cuda:N"), std::string::npos)
        << parsed.status().message();
  }
}

// Counts how often adopted memory is given back, and which bytes.
struct Releases {
  int calls = 0;
  void* last = nullptr;
  size_t bytes = 0;
  static void release(void* context, void* data, size_t size) {
    auto* self = static_cast<Releases*>(context);
    ++self->calls;
    self->last = data;
    self->bytes = size;
  }
};

TEST(Buffer, AdoptedMemoryIsGivenBackOnceThroughItsAllocator) {
  std::vector<std::byte> storage(64), other(32);
  Releases releases, other_releases;
  {
    Buffer a = Buffer::adopt(storage.data(), storage.size(), Device::cuda(1),
                             {&Releases::release, &releases});
    EXPECT_EQ(a.device(), Device::cuda(1));
    Buffer b = std::move(a);  // a move transfers ownership, it releases nothing
    EXPECT_EQ(releases.calls, 0);
    EXPECT_EQ(a.device(), Device::host());
    EXPECT_EQ(b.device(), Device::cuda(1));
    b = Buffer::adopt(other.data(), other.size(), Device::cuda(1),
                      {&Releases::release, &other_releases});  // assigned over: the old goes back
    EXPECT_EQ(releases.calls, 1);
    EXPECT_EQ(releases.last, storage.data());
    EXPECT_EQ(releases.bytes, storage.size());
    EXPECT_EQ(other_releases.calls, 0);
  }
  EXPECT_EQ(releases.calls, 1);
  EXPECT_EQ(other_releases.calls, 1);
  EXPECT_EQ(other_releases.last, other.data());
}

TEST(Tensor, CarriesItsStorageDeviceThroughMovesAndViews) {
  std::vector<float> storage(6);
  Releases releases;
  Tensor t = Tensor::from_buffer(
      DType::kF32, {2, 3},
      Buffer::adopt(storage.data(), storage.size() * sizeof(float), Device::cuda(2),
                    {&Releases::release, &releases}));
  EXPECT_EQ(t.device(), Device::cuda(2));
  EXPECT_FALSE(t.is_host());
  EXPECT_EQ(t.view().device(), Device::cuda(2));
  Tensor moved = std::move(t);
  EXPECT_EQ(moved.device(), Device::cuda(2));
  EXPECT_TRUE(t.is_host());  // a moved-from tensor is empty, on the host
  EXPECT_TRUE(Tensor::zeros(DType::kF32, {4}).is_host());
  EXPECT_EQ(Tensor::view_of(DType::kF32, {6}, storage.data(), Device::cuda(0)).device(),
            Device::cuda(0));
}

TEST(Tensor, ConvertRefusesDeviceMemoryNamingTheDevice) {
  std::vector<float> storage(4, 1.0f);
  const Tensor on_gpu = Tensor::view_of(DType::kF32, {4}, storage.data(), Device::cuda(0));
  const Result<Tensor> converted = convert(on_gpu, DType::kBF16);
  ASSERT_FALSE(converted.ok());
  EXPECT_EQ(converted.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(converted.status().message().find("cuda:0"), std::string::npos);
}

TEST(HostRuntime, AllocatesAlignedHostTensorsForItsStreams) {
  DeviceRuntime& host = host_runtime();
  EXPECT_EQ(host.device(), Device::host());
  EXPECT_EQ(host.allocator().device(), Device::host());
  const Stream stream = host.default_stream();
  Result<Tensor> t = empty_tensor(host.allocator(), DType::kBF16, {3, 5}, stream);
  ASSERT_TRUE(t.ok()) << t.status().message();
  EXPECT_TRUE(t->is_host());
  EXPECT_EQ(t->nbytes(), 30u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % Buffer::kDefaultAlignment, 0u);

  const Result<Tensor> wrong_stream =
      empty_tensor(host.allocator(), DType::kF32, {2}, Stream{Device::cuda(0)});
  ASSERT_FALSE(wrong_stream.ok());
  EXPECT_NE(wrong_stream.status().message().find("cuda:0"), std::string::npos);
  const Result<Tensor> overflow =
      empty_tensor(host.allocator(), DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, stream);
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(empty_tensor(host.allocator(), DType::kF32, {2, -1}, stream).ok());
}

TEST(HostRuntime, OrdersWorkOnHostStreamsAndRefusesOthers) {
  DeviceRuntime& host = host_runtime();
  const Stream stream = host.default_stream();
  Result<Event> event = host.record(stream);
  ASSERT_TRUE(event.ok());
  EXPECT_TRUE(host.wait(stream, *event).ok());
  EXPECT_TRUE(host.synchronize(stream).ok());
  const Stream gpu{Device::cuda(0)};
  EXPECT_FALSE(host.record(gpu).ok());
  EXPECT_FALSE(host.synchronize(gpu).ok());
  EXPECT_FALSE(host.wait(stream, Event{Device::cuda(0)}).ok());
}

TEST(HostRuntime, CopiesMatchingHostTensorsAndRefusesTheRest) {
  DeviceRuntime& host = host_runtime();
  const Stream stream = host.default_stream();
  Tensor src = Tensor::empty(DType::kI32, {2, 2});
  for (int i = 0; i < 4; ++i) src.data<int32_t>()[i] = 10 + i;
  Tensor dst = Tensor::zeros(DType::kI32, {4});  // the element count matters, not the shape
  ASSERT_TRUE(host.copy(dst, src, stream).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(dst.data<int32_t>()[i], 10 + i);

  Tensor wrong_dtype = Tensor::zeros(DType::kF32, {4});
  EXPECT_EQ(host.copy(wrong_dtype, src, stream).code(), StatusCode::kInvalidArgument);
  Tensor short_dst = Tensor::zeros(DType::kI32, {3});
  EXPECT_EQ(host.copy(short_dst, src, stream).code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> device_bytes(4);
  Tensor on_gpu = Tensor::view_of(DType::kI32, {4}, device_bytes.data(), Device::cuda(0));
  const Status refused = host.copy(on_gpu, src, stream);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("cuda:0"), std::string::npos) << refused.message();
  EXPECT_EQ(device_bytes[0], 0);  // nothing was written through the device address
}

}  // namespace
}  // namespace ms
