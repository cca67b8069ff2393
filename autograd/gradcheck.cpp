// Finite differences against one backward pass (see gradcheck.h).
#include "autograd/gradcheck.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/tensor_ops.h"
#include "autograd/variable.h"
#include "tensor/ops.h"

namespace spmd::autograd {
namespace {

// sum(w * fn(inputs)) as a double, without recording.
double projected(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                 const std::vector<Tensor>& inputs, const Tensor& w) {
  NoGradGuard no_grad;
  return ops::sum(ops::mul(ops::to(fn(inputs), DType::kF64), w)).item<double>();
}

void check_input(const Tensor& t, size_t i) {
  SPMD_CHECK(t.dtype() == DType::kF64 && t.is_cpu() && t.is_contiguous() && t.is_leaf(),
             "gradcheck: input ", i, " must be a contiguous f64 CPU leaf, got ",
             dtype_name(t.dtype()), " ", t.shape(), " on ", t.device());
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, const GradcheckOptions& options) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) check_input(inputs[i], i);
  // The analytic gradients: one backward of sum(w * y).
  Tensor y = fn(inputs);
  SPMD_CHECK(y.requires_grad(), "gradcheck: the output does not require grad");
  Generator gen(options.seed);
  const Tensor w = ops::uniform(y.shape(), -1, 1, {DType::kF64}, &gen);
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) Tensor(t).set_grad(Tensor());
  backward(sum(mul(to(y, DType::kF64), w)));

  GradcheckResult result;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined() || !x.requires_grad()) continue;
    const Tensor grad = x.grad().defined() ? ops::contiguous(x.grad()) : ops::zeros_like(x);
    double* px = x.data<double>();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double saved = px[j];
      px[j] = saved + options.eps;
      const double plus = projected(fn, inputs, w);
      px[j] = saved - options.eps;
      const double minus = projected(fn, inputs, w);
      px[j] = saved;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double analytic = grad.data<double>()[j];
      const double err = std::abs(analytic - numeric);
      result.max_abs_error = std::max(result.max_abs_error, err);
      if (err > options.atol + options.rtol * std::abs(numeric) && result.ok) {
        result.ok = false;
        result.message = str_cat("input ", i, " ", x.shape(), " element ", j, ": analytic ",
                                 analytic, ", numeric ", numeric);
      }
    }
  }
  return result;
}

}  // namespace spmd::autograd
