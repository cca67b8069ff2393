// What the CUDA backend's files share: the device scope, the calling
// thread's current stream, scratch memory from the caching allocator, and
// the translation of Tensors into the plain descriptions kernels/ takes.
// Internal to tensor/cuda/ (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "kernels/types.h"
#include "tensor/tensor.h"

namespace spmd::cuda::detail {

// Makes `device` current for the scope (when it is not already), restoring
// the previous device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
};

// The calling thread's current stream of `device` (cuda_api.h's current_stream).
cudaStream_t current_stream_handle(int device);

// Scratch memory for kernels/, from the caching allocator on the current
// stream; returned to the allocator when the scope ends (the stream ordering
// makes that safe as soon as the kernels are queued).
class AllocatorScratch : public kernels::Scratch {
 public:
  AllocatorScratch(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  void* allocate(size_t nbytes) override;

 private:
  int device_;
  cudaStream_t stream_;
  std::vector<DataPtr> blocks_;
};

// The device and stream an op runs on: the tensors' device made current, and
// its current stream.
struct Launch {
  explicit Launch(Device device)
      : scope(device.index), device(device.index), stream(current_stream_handle(device.index)) {}
  DeviceScope scope;
  int device;
  cudaStream_t stream;
};

kernels::ScalarType scalar_type(DType dt);
kernels::TensorArg tensor_arg(const Tensor& t);
// A contiguous tensor as a Buffer (undefined: a null Buffer). REQUIRES: contiguous.
kernels::Buffer buffer(const Tensor& t, const char* op);

}  // namespace spmd::cuda::detail
