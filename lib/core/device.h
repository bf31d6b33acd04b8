// Where a tensor's storage lives and where the work on it runs: a Device (the host, or one CUDA
// device by ordinal), and the stream-ordered handles of that device's work. ms_core links no
// CUDA, so the CUDA handles are opaque here (a cudaStream_t / cudaEvent_t behind a void*); the
// runtime that creates and uses them (core/device_runtime.h) is where CUDA is called.
//
// Work on the host runs on the calling thread when it is issued, so the host's streams are
// ordered already and its events are complete when recorded. On a CUDA device an op is
// enqueued on a stream and returns at once: a tensor written by work on one stream may be read
// by work on another only after that stream waits for an event recorded after the write
// (DeviceRuntime::record / wait). That is the contract the model and the optimizer follow on
// every device, so the host path exercises the same ordering calls the CUDA path needs.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ms {

enum class DeviceType : uint8_t { kHost, kCuda };

struct Device {
  DeviceType type = DeviceType::kHost;
  int index = 0;  // the CUDA device ordinal; 0 for the host

  static constexpr Device host() { return {}; }
  static constexpr Device cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }
  constexpr bool is_host() const { return type == DeviceType::kHost; }
  friend constexpr bool operator==(const Device&, const Device&) = default;
};

// "cpu" or "cuda:N", the spelling train.device and --device take.
std::string device_name(Device device);
// Parses "cpu", "cuda" (device 0) or "cuda:N" (N >= 0). InvalidArgument naming the text and the
// accepted forms otherwise. Whether such a device exists is the runtime's question, not this.
Result<Device> parse_device(std::string_view text);

// An ordered queue of work on one device. handle is the device's native stream (nullptr: its
// default stream; always nullptr on the host).
struct Stream {
  Device device;
  void* handle = nullptr;
};

// A point in a stream's work: everything issued on the stream before the event was recorded.
// handle is the device's native event (nullptr on the host, where recorded work is done).
struct Event {
  Device device;
  void* handle = nullptr;
};

}  // namespace ms
