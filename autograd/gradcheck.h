// Gradient checking: does an op's backward agree with finite differences of
// its forward? As torch.autograd.gradcheck, in f64 so that rounding does not
// hide a wrong formula.
//
// For y = fn(inputs), the check fixes a random cotangent w of y's shape and
// compares, for every element x_i of every input that requires grad,
//   analytic:  d/dx_i sum(w * y), from one backward pass
//   numeric:   (L(x_i + eps) - L(x_i - eps)) / (2 eps),  L = sum(w * fn(inputs))
// accepting |analytic - numeric| <= atol + rtol |numeric|. A random w checks
// every output's gradient at once (a wrong formula for any output shows up
// with probability 1), at the cost of 2 forwards per input element: keep
// shapes tiny.
#pragma once

#include <functional>
#include <string>

#include "tensor/tensor.h"

namespace spmd::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-5;
  uint64_t seed = 0;  // of the cotangent w
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // where the worst mismatch is, when !ok
};

// REQUIRES: the inputs that require grad are contiguous f64 CPU leaves; fn
// is deterministic (a dropout in it must reseed its generator each call).
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace spmd::autograd
