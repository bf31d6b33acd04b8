// Test support for the kernels' tests (with CUDA only): device calls whose failure is reported
// as a test failure, and host arrays copied to and from device buffers.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kernels/device.h"

namespace ms::test {

// Reports a failed device call as a test failure; returns whether it succeeded.
inline bool succeeded(const Status& s) {
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok();
}

// A device buffer holding data[0, count), or an empty one after reporting the failure.
template <typename T>
kernels::DeviceBuffer upload(const T* data, size_t count) {
  Result<kernels::DeviceBuffer> buffer = kernels::DeviceBuffer::allocate(count * sizeof(T));
  if (!succeeded(buffer.status())) return {};
  if (!succeeded(kernels::copy_to_device(buffer->data(), data, count * sizeof(T)))) return {};
  return std::move(buffer).value();
}

// The first `count` elements of a device buffer.
template <typename T>
std::vector<T> download(const kernels::DeviceBuffer& buffer, size_t count) {
  std::vector<T> out(count);
  EXPECT_TRUE(succeeded(kernels::copy_to_host(out.data(), buffer.data(), count * sizeof(T))));
  return out;
}

}  // namespace ms::test
