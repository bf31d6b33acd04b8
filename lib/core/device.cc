#include "core/device.h"

#include <charconv>

namespace ms {

std::string device_name(Device device) {
  if (device.is_host()) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

Result<Device> parse_device(std::string_view text) {
  if (text == "cpu") return Device::host();
  if (text == "cuda") return Device::cuda(0);
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.starts_with(kCudaPrefix)) {
    const std::string_view digits = text.substr(kCudaPrefix.size());
    int ordinal = -1;
    const auto [end, error] =
        std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (!digits.empty() && error == std::errc() && end == digits.data() + digits.size() &&
        ordinal >= 0) {
      return Device::cuda(ordinal);
    }
  }
  return InvalidArgument("unknown device '" + std::string(text) +
                         "': expected cpu, cuda or cuda:N (N a device ordinal >= 0)");
}

}  // namespace ms
