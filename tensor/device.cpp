// Device names ("cpu", "cuda", "cuda:N", "meta") and the default device.
#include "tensor/device.h"

#include <charconv>

#include "runtime/error.h"

namespace spmd {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text == "meta") return meta();
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  SPMD_THROW(InvalidArgument, "unknown device '", text, "' (expected cpu, cuda, cuda:N or meta)");
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  if (is_meta()) return "meta";
  return "cuda:" + std::to_string(index);
}

namespace {
thread_local Device current_default = Device::cpu();
}  // namespace

Device default_device() { return current_default; }

DefaultDeviceGuard::DefaultDeviceGuard(Device device) : previous_(current_default) {
  current_default = device;
}
DefaultDeviceGuard::~DefaultDeviceGuard() { current_default = previous_; }

}  // namespace spmd
