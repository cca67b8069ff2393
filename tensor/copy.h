// Moving and converting data: between dtypes, between devices, into an
// existing tensor.
#pragma once

#include "tensor/tensor.h"

namespace spmd::ops {

// dst[...] = src[...] converted to dst's dtype; src broadcasts to dst's shape;
// the two may live on different devices. Returns dst.
const Tensor& copy_(const Tensor& dst, const Tensor& src);
// A new contiguous tensor with the same values.
Tensor clone(const Tensor& t);
// The tensor converted to `dtype` (itself when it already has that dtype).
Tensor to(const Tensor& t, DType dtype);
// The tensor on `device` (itself when it is already there).
Tensor to(const Tensor& t, Device device);

// Blocks until all queued work on the device is done (a no-op on the CPU).
void synchronize(Device device);

}  // namespace spmd::ops
