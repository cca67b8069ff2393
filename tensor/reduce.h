// Reductions over any set of dims (negative dims allowed; an empty list means
// all dims), with keepdim as in PyTorch. Sums of half types accumulate in f32;
// integer sums in i64.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace spmd::ops {

Tensor sum(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& t, const std::vector<int>& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (correction = 1), as torch.var.
Tensor var(const Tensor& t, const std::vector<int>& dims = {}, int64_t correction = 1,
           bool keepdim = false);
// Index of the largest (smallest) element along dim, i64; the first on ties.
Tensor argmax(const Tensor& t, int dim, bool keepdim = false);
Tensor argmin(const Tensor& t, int dim, bool keepdim = false);
// Sums `t` down to `shape` (the shape it was broadcast from): the reduction
// that backward of a broadcasting op needs.
Tensor sum_to(const Tensor& t, const Shape& shape);

}  // namespace spmd::ops
