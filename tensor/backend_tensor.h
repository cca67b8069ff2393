// A contiguous tensor allocated by a given backend: what a Backend's own
// default methods (the composed attention, bias + GELU) and the CPU's
// fused kernels use for their outputs and workspaces, so that the memory comes from the backend
// being implemented rather than whichever one backend_for() hands out.
#pragma once

#include <memory>
#include <utility>

#include "tensor/backend.h"

namespace spmd {

inline Tensor empty_on(Backend& be, Device device, const Shape& shape, DType dtype) {
  const size_t nbytes = size_t(shape.numel()) * element_size(dtype);
  auto storage = std::make_shared<Storage>(be.allocate(nbytes, device), nbytes, device);
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

// t as a contiguous f32 tensor of the same shape, allocated by `be`: how a
// kernel written for f32 takes bf16 and f16 inputs (its outputs then go
// through f32 temporaries, each rounded once on the way back).
inline Tensor widened_on(Backend& be, const Tensor& t) {
  Tensor w = empty_on(be, t.device(), t.shape(), DType::kF32);
  be.copy(t, w);
  return w;
}

}  // namespace spmd
