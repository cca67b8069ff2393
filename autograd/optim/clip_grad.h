// Gradient clipping by global norm, as torch.nn.utils.clip_grad_norm_: if
// the L2 norm of all gradients together exceeds max_norm, scale every
// gradient by max_norm / (norm + 1e-6).
//
// The norm is computed in two steps so that sharded training can finish it:
// each process sums the squares of the gradients it holds (local_grad_sq_sum),
// a sharded strategy all-reduces that sum across the shards (pass it as
// `reduce`), and the square root of the total is the global norm. Unsharded,
// `reduce` is the identity.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tensor/tensor.h"

namespace spmd::optim {

// Elements of a gradient local_grad_sq_sum squares in f64 at once.
inline constexpr int64_t kSquaresSlice = int64_t(1) << 20;

// sum over the gradients of sum(g^2), accumulated in f64, kSquaresSlice
// elements at a time; undefined grads count 0.
double local_grad_sq_sum(const std::vector<Tensor>& params);
// Scales every gradient by max_norm / (total_norm + 1e-6) when that is below 1.
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm);
// Both steps; returns the global norm (before clipping).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::function<double(double)>& reduce = nullptr);

}  // namespace spmd::optim
