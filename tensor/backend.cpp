// Picks the backend of a device. The CPU backend always exists; the CUDA one
// only in builds with CUDA (SPMD_WITH_CUDA), the single place this layer
// asks which build it is in.
#include "tensor/backend.h"

#include <iterator>

#include "runtime/profiler.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/meta_backend.h"
#include "tensor/profiled_backend.h"
#if SPMD_WITH_CUDA
#include "tensor/cuda/cuda_backend.h"
#endif

namespace spmd {

// clang-format off
// The names, in the order of the enums (backend.h).
const char* op_name(UnaryOp op) {
  static constexpr const char* kNames[] = {
      "neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "gelu_tanh",
      "gelu_erf", "silu", "sin", "cos", "square", "reciprocal", "sign", "logical_not"};
  static_assert(std::size(kNames) == size_t(UnaryOp::kLogicalNot) + 1,  // the last in backend.h
                "one name per UnaryOp");
  return kNames[int(op)];
}

const char* op_name(BinaryOp op) {
  static constexpr const char* kNames[] = {
      "add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
      "logical_and", "logical_or", "relu_backward", "gelu_tanh_backward", "gelu_erf_backward",
      "silu_backward", "sigmoid_backward", "tanh_backward"};
  static_assert(std::size(kNames) == size_t(BinaryOp::kTanhBackward) + 1,  // the last in backend.h
                "one name per BinaryOp");
  return kNames[int(op)];
}
// clang-format on

namespace {

Backend& device_backend(Device device) {
  if (device.is_cpu()) return cpu_backend();
  if (device.is_meta()) return meta_backend();
#if SPMD_WITH_CUDA
  return cuda_backend();
#else
  SPMD_THROW(Error, "cannot use ", device,
             ": this spmd was built without CUDA (SPMD_CUDA=OFF, or no nvcc was found)");
#endif
}

}  // namespace

// While the profiler is on, every op runs through its wrapper (one branch when off).
Backend& backend_for(Device device) {
  Backend& backend = device_backend(device);
  return profiler::enabled() ? profiled_backend(backend) : backend;
}

Backend& backend_for(std::initializer_list<const Tensor*> tensors, const char* op) {
  const Tensor* first = nullptr;
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (!first) {
      first = t;
    } else {
      SPMD_CHECK(t->device() == first->device(), op, ": expected all tensors on one device, got ",
                 first->device(), " and ", t->device());
    }
  }
  return backend_for(first ? first->device() : Device::cpu());
}

}  // namespace spmd
