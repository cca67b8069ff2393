// Picks the backend of a device. The CPU backend always exists; the CUDA one
// only in builds with CUDA (SPMD_WITH_CUDA), the single place this layer
// asks which build it is in.
#include "tensor/backend.h"

#include "tensor/cpu/cpu_backend.h"
#if SPMD_WITH_CUDA
#include "tensor/cuda/cuda_backend.h"
#endif

namespace spmd {

Backend& backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend();
#if SPMD_WITH_CUDA
  return cuda_backend();
#else
  SPMD_THROW(Error, "cannot use ", device,
             ": this spmd was built without CUDA (SPMD_CUDA=OFF, or no nvcc was found)");
#endif
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
