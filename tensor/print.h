// Printing like PyTorch's repr:
//   tensor([[0.1000, 0.2000],
//           [0.3000, 0.4000]], dtype=f64)
// Long tensors are summarized with "..." (first and last three per dim).
#pragma once

#include <ostream>
#include <string>

#include "tensor/tensor.h"

namespace spmd {

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::string to_string(const Tensor& t);

}  // namespace spmd
