// Where a tensor's bytes live: the host (`cpu`) or one GPU (`cuda:N`).
#pragma once

#include <ostream>
#include <string>
#include <string_view>

namespace spmd {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // the GPU's ordinal; 0 for the CPU

  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  // Parses "cpu", "cuda" (= cuda:0) or "cuda:N"; throws InvalidArgument otherwise.
  static Device parse(std::string_view text);

  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const;  // "cpu", "cuda:1"

  friend bool operator==(const Device&, const Device&) = default;
};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace spmd
