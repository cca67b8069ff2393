// The CPU backend: loops over strided memory with OpenMP across elements or
// rows, and Eigen (with OpenBLAS underneath when present) for matrix products.
#pragma once

#include "tensor/backend.h"

namespace spmd {

Backend& cpu_backend();

}  // namespace spmd
