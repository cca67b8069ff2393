// The CUDA backend: the Backend of every cuda:N device. Compiled only in CUDA
// builds; it allocates through the caching allocator and launches the kernels
// of kernels/ on the current stream.
#pragma once

#include "tensor/backend.h"

namespace spmd {

Backend& cuda_backend();

}  // namespace spmd
