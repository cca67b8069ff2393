// Where a tensor's bytes live: the host (`cpu`), one GPU (`cuda:N`), or
// nowhere (`meta`): a meta tensor has a shape, strides and a dtype but no
// bytes, so a model too large for any one device can be built, and laid
// out by the parallel strategies, before each rank allocates only its own
// pieces (tensor/deferred.h).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace spmd {

enum class DeviceType : uint8_t { kCPU, kCUDA, kMeta };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // the GPU's ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  static Device meta() { return {DeviceType::kMeta, 0}; }
  // Parses "cpu", "cuda" (= cuda:0), "cuda:N" or "meta"; throws InvalidArgument otherwise.
  static Device parse(std::string_view text);

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  bool is_meta() const { return type == DeviceType::kMeta; }
  std::string str() const;  // "cpu", "cuda:1", "meta"

  friend bool operator==(const Device&, const Device&) = default;
};

// The device a factory uses when its options name none (tensor/factory.h):
// the CPU, unless a DefaultDeviceGuard on this thread says otherwise.
Device default_device();

// While alive, factories on this thread default to `device`, as PyTorch's
// `with torch.device("meta"):`. A model built under
// DefaultDeviceGuard(Device::meta()) gets parameters with no bytes.
class DefaultDeviceGuard {
 public:
  explicit DefaultDeviceGuard(Device device);
  ~DefaultDeviceGuard();
  DefaultDeviceGuard(const DefaultDeviceGuard&) = delete;
  DefaultDeviceGuard& operator=(const DefaultDeviceGuard&) = delete;

 private:
  Device previous_;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace spmd
