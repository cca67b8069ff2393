// A contiguous tensor allocated by a given backend: what a Backend's own
// default methods (the composed attention, bias + GELU) use for their
// outputs and workspaces, so that the memory comes from the backend being
// implemented rather than whichever one backend_for() hands out.
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

}  // namespace spmd
