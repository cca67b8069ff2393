// Reductions: the dims and dtype rules, then one Backend call that reduces
// into a keepdim-shaped output, viewed without the reduced dims when
// keepdim is false. var is composed of mean, sub, mul and sum.
#include "tensor/reduce.h"

#include <cmath>

#include "tensor/backend.h"
#include "tensor/copy.h"
#include "tensor/elementwise.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::ops {
namespace {

const char* reduction_name(Reduction op) {
  switch (op) {
    case Reduction::kSum:
      return "sum";
    case Reduction::kMean:
      return "mean";
    case Reduction::kMax:
      return "amax";
    case Reduction::kMin:
      return "amin";
    case Reduction::kProd:
      return "prod";
  }
  return "reduce";
}

// A mask of the dims to reduce: all of them when `dims` is empty.
std::vector<bool> reduced_dims(const Tensor& t, const std::vector<int>& dims, const char* op) {
  std::vector<bool> reduced(size_t(t.ndim()), dims.empty());
  for (int dim : dims) {
    const int d = wrap_dim(dim, t.ndim(), op);
    if (t.ndim() == 0) continue;
    SPMD_CHECK(!reduced[d], op, ": dim ", dim, " appears twice in the list of dims");
    reduced[d] = true;
  }
  return reduced;
}

// t's shape with each reduced dim set to 1 (keepdim) or removed.
Shape reduced_shape(const Tensor& t, const std::vector<bool>& reduced, bool keepdim) {
  Shape shape;
  for (int d = 0; d < t.ndim(); ++d) {
    if (!reduced[d])
      shape.push_back(t.size(d));
    else if (keepdim)
      shape.push_back(1);
  }
  return shape;
}

DType result_dtype(Reduction op, DType dt) {
  const bool integral = !is_floating(dt);
  if (integral && (op == Reduction::kSum || op == Reduction::kProd)) return DType::kI64;
  SPMD_CHECK(!(integral && op == Reduction::kMean), "mean: expected a floating-point tensor, got ",
             dtype_name(dt), " (convert it first)");
  return dt;
}

Tensor reduce(Reduction op, const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  const char* name = reduction_name(op);
  const std::vector<bool> reduced = reduced_dims(t, dims, name);
  const Shape kept = reduced_shape(t, reduced, true);
  if (op == Reduction::kMax || op == Reduction::kMin) {
    SPMD_CHECK(kept.numel() == 0 || t.numel() > 0, name, ": cannot reduce a tensor of shape ",
               t.shape(), " over an empty dim (there is no identity)");
  }
  Tensor out = empty(kept, {result_dtype(op, t.dtype()), t.device()});
  backend_for(t.device()).reduce(op, t, out);
  return keepdim ? out : view(out, reduced_shape(t, reduced, false));
}

}  // namespace

Tensor sum(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return reduce(Reduction::kSum, t, dims, keepdim);
}
Tensor mean(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return reduce(Reduction::kMean, t, dims, keepdim);
}
Tensor amax(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return reduce(Reduction::kMax, t, dims, keepdim);
}
Tensor amin(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return reduce(Reduction::kMin, t, dims, keepdim);
}
Tensor prod(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return reduce(Reduction::kProd, t, dims, keepdim);
}

Tensor var(const Tensor& t, const std::vector<int>& dims, int64_t correction, bool keepdim) {
  SPMD_CHECK(is_floating(t.dtype()), "var: expected a floating-point tensor, got ",
             dtype_name(t.dtype()));
  // The half types are squared and summed in f32, then rounded once.
  const Tensor x = is_half_float(t.dtype()) ? to(t, DType::kF32) : t;
  const std::vector<bool> reduced = reduced_dims(x, dims, "var");
  int64_t n = 1;
  for (int d = 0; d < x.ndim(); ++d)
    if (reduced[d]) n *= x.size(d);
  const Tensor centered = sub(x, mean(x, dims, true));
  const Tensor v = div(sum(mul(centered, centered), dims, keepdim),
                       double(std::max<int64_t>(n - correction, 0)));
  return to(v, t.dtype());
}

namespace {
Tensor arg_reduce(bool is_max, const Tensor& t, int dim, bool keepdim) {
  const char* name = is_max ? "argmax" : "argmin";
  const Tensor x = t.ndim() == 0 ? view(t, {1}) : t;
  const int d = wrap_dim(dim, x.ndim(), name);
  SPMD_CHECK(x.size(d) > 0, name, ": cannot reduce over dim ", dim, " of size 0 (shape ", t.shape(),
             ")");
  Shape shape = x.shape();
  shape[d] = 1;
  Tensor out = empty(shape, {DType::kI64, t.device()});
  backend_for(t.device()).arg_reduce(is_max, x, d, out);
  if (t.ndim() == 0) return view(out, Shape{});
  return keepdim ? out : squeeze(out, d);
}
}  // namespace

Tensor argmax(const Tensor& t, int dim, bool keepdim) { return arg_reduce(true, t, dim, keepdim); }
Tensor argmin(const Tensor& t, int dim, bool keepdim) { return arg_reduce(false, t, dim, keepdim); }

Tensor sum_to(const Tensor& t, const Shape& shape) {
  SPMD_CHECK(broadcast_shapes(t.shape(), shape, "sum_to") == t.shape(), "sum_to: shape ", shape,
             " does not broadcast to ", t.shape());
  if (t.shape() == shape) return t;
  const int lead = t.ndim() - shape.ndim();
  std::vector<int> dims;
  for (int d = 0; d < t.ndim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && t.size(d) != 1)) dims.push_back(d);
  if (dims.empty()) return reshape(t, shape);  // only size-1 dims differ
  return reshape(sum(t, dims, true), shape);
}

}  // namespace spmd::ops
