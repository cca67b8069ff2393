// The CUDA backend's shared helpers (tensor/cuda/context.h).
#include "tensor/cuda/context.h"

#include "kernels/cuda_check.h"
#include "tensor/cuda/allocator.h"

namespace spmd::cuda::detail {

DeviceScope::DeviceScope(int device) {
  int current = -1;
  SPMD_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    SPMD_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

void* AllocatorScratch::allocate(size_t nbytes) {
  blocks_.push_back(CachingAllocator::instance().allocate(nbytes, device_, stream_));
  return blocks_.back().get();
}

kernels::ScalarType scalar_type(DType dt) {
  switch (dt) {
    case DType::kF32:
      return kernels::ScalarType::kF32;
    case DType::kF64:
      return kernels::ScalarType::kF64;
    case DType::kBF16:
      return kernels::ScalarType::kBF16;
    case DType::kF16:
      return kernels::ScalarType::kF16;
    case DType::kI32:
      return kernels::ScalarType::kI32;
    case DType::kI64:
      return kernels::ScalarType::kI64;
    case DType::kU8:
      return kernels::ScalarType::kU8;
    case DType::kBool:
      return kernels::ScalarType::kBool;
  }
  SPMD_THROW(InvalidArgument, "unknown dtype ", int(dt));
}

kernels::TensorArg tensor_arg(const Tensor& t) {
  kernels::TensorArg a;
  a.data = t.raw_data();
  a.dtype = scalar_type(t.dtype());
  a.ndim = t.ndim();
  for (int d = 0; d < t.ndim(); ++d) {
    a.sizes[d] = t.shape()[d];
    a.strides[d] = t.strides()[d];
  }
  return a;
}

kernels::Buffer buffer(const Tensor& t, const char* op) {
  if (!t.defined()) return {};
  SPMD_CHECK(t.is_contiguous(), op, ": expected a contiguous tensor on CUDA, got shape ", t.shape(),
             " with strides ", t.strides());
  return {t.raw_data(), scalar_type(t.dtype())};
}

}  // namespace spmd::cuda::detail
