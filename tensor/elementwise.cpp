// Elementwise ops: the shape and dtype rules, then one Backend call.
//
//   shape:  numpy broadcasting; each operand reaches the backend as a view
//           expanded to the output's shape (stride 0 on broadcast dims).
//   dtype:  promote_types of the operands; true division and the floating
//           functions (exp, tanh...) turn integers into f32; a Python-style
//           scalar keeps a tensor's dtype unless it is a fraction and the
//           tensor integral (then f32), as in PyTorch.
//   output: a new contiguous tensor, or the first operand for the `_` forms.
#include "tensor/elementwise.h"

#include <cmath>

#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/views.h"

namespace spmd::ops {
namespace {

bool is_activation_backward(BinaryOp op) { return op >= BinaryOp::kReluBackward; }

// Unary ops whose result is a fraction even for integer input.
bool is_floating_op(UnaryOp op) {
  return !(op == UnaryOp::kNeg || op == UnaryOp::kAbs || op == UnaryOp::kSquare ||
           op == UnaryOp::kSign || op == UnaryOp::kRelu || op == UnaryOp::kLogicalNot);
}

// The dtype `op` computes in for operands of dtypes a and b.
DType compute_dtype(BinaryOp op, DType a, DType b) {
  DType dt = promote_types(a, b);
  if (op == BinaryOp::kDiv && !is_floating(dt)) dt = DType::kF32;  // true division
  SPMD_CHECK(!is_activation_backward(op) || is_floating(dt), op_name(op),
             ": expected floating-point tensors, got ", dtype_name(a), " and ", dtype_name(b));
  return dt;
}

// The dtype of `t op s` for a Python-style number s.
DType scalar_dtype(BinaryOp op, DType t, double s) {
  const bool fraction = !std::isfinite(s) || s != std::floor(s);
  DType dt = is_floating(t) || !fraction ? t : DType::kF32;
  if (dt == DType::kBool && !produces_bool(op) && op != BinaryOp::kMaximum &&
      op != BinaryOp::kMinimum)
    dt = DType::kI64;  // bool + 1 is an integer
  return compute_dtype(op, dt, dt);
}

// t converted to dtype and expanded to shape: a backend operand.
Tensor operand(const Tensor& t, DType dtype, const Shape& shape) {
  return expand(to(t, dtype), shape);
}

void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  SPMD_CHECK(a.device() == b.device(), op, ": expected both tensors on one device, got ",
             a.device(), " and ", b.device());
}

// The in-place form: t = t op other, in t's dtype. REQUIRES other broadcast to t.
Tensor& binary_inplace(BinaryOp op, Tensor& t, const Tensor& other) {
  check_same_device(t, other, op_name(op));
  const Shape shape = broadcast_shapes(t.shape(), other.shape(), op_name(op));
  SPMD_CHECK(shape == t.shape(), op_name(op), "_: ", other.shape(),
             " does not broadcast to the in-place operand's shape ", t.shape());
  const DType dt = compute_dtype(op, t.dtype(), other.dtype());
  SPMD_CHECK(is_floating(t.dtype()) || !is_floating(dt), op_name(op), "_: the result type ",
             dtype_name(dt), " cannot be stored in a ", dtype_name(t.dtype()), " tensor");
  backend_for(t.device()).binary(op, t, operand(other, t.dtype(), shape), t);
  t.storage()->bump_version();
  return t;
}

Tensor& scalar_inplace(BinaryOp op, Tensor& t, double s) {
  const DType dt = scalar_dtype(op, t.dtype(), s);
  SPMD_CHECK(is_floating(t.dtype()) || !is_floating(dt), op_name(op), "_: the result type ",
             dtype_name(dt), " cannot be stored in a ", dtype_name(t.dtype()), " tensor");
  backend_for(t.device()).binary_scalar(op, t, s, t, false);
  t.storage()->bump_version();
  return t;
}

Tensor scalar_op(BinaryOp op, const Tensor& t, double s, bool scalar_first) {
  const DType dt = scalar_dtype(op, t.dtype(), s);
  if (op == BinaryOp::kPow && !is_floating(dt)) {
    SPMD_CHECK(s >= 0, "pow: integer tensors cannot be raised to the negative power ", s);
  }
  const Tensor x = to(t, dt);
  Tensor out = empty(t.shape(), {produces_bool(op) ? DType::kBool : dt, t.device()});
  backend_for(t.device()).binary_scalar(op, x, s, out, scalar_first);
  return out;
}

}  // namespace

// --- Binary ------------------------------------------------------------------

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_same_device(a, b, op_name(op));
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op_name(op));
  const DType dt = compute_dtype(op, a.dtype(), b.dtype());
  Tensor out = empty(shape, {produces_bool(op) ? DType::kBool : dt, a.device()});
  backend_for(a.device()).binary(op, operand(a, dt, shape), operand(b, dt, shape), out);
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kDiv, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kPow, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kMinimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kGe, a, b); }
Tensor logical_and(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLogicalAnd, a, b); }
Tensor logical_or(const Tensor& a, const Tensor& b) { return binary(BinaryOp::kLogicalOr, a, b); }

// --- With a scalar -------------------------------------------------------------

Tensor add(const Tensor& t, double s) { return scalar_op(BinaryOp::kAdd, t, s, false); }
Tensor sub(const Tensor& t, double s) { return scalar_op(BinaryOp::kSub, t, s, false); }
Tensor sub(double s, const Tensor& t) { return scalar_op(BinaryOp::kSub, t, s, true); }
Tensor mul(const Tensor& t, double s) { return scalar_op(BinaryOp::kMul, t, s, false); }
Tensor div(const Tensor& t, double s) { return scalar_op(BinaryOp::kDiv, t, s, false); }
Tensor div(double s, const Tensor& t) { return scalar_op(BinaryOp::kDiv, t, s, true); }
Tensor pow(const Tensor& t, double exponent) {
  return scalar_op(BinaryOp::kPow, t, exponent, false);
}
Tensor maximum(const Tensor& t, double s) { return scalar_op(BinaryOp::kMaximum, t, s, false); }
Tensor minimum(const Tensor& t, double s) { return scalar_op(BinaryOp::kMinimum, t, s, false); }
Tensor eq(const Tensor& t, double s) { return scalar_op(BinaryOp::kEq, t, s, false); }
Tensor ne(const Tensor& t, double s) { return scalar_op(BinaryOp::kNe, t, s, false); }
Tensor lt(const Tensor& t, double s) { return scalar_op(BinaryOp::kLt, t, s, false); }
Tensor le(const Tensor& t, double s) { return scalar_op(BinaryOp::kLe, t, s, false); }
Tensor gt(const Tensor& t, double s) { return scalar_op(BinaryOp::kGt, t, s, false); }
Tensor ge(const Tensor& t, double s) { return scalar_op(BinaryOp::kGe, t, s, false); }
Tensor clamp(const Tensor& t, double low, double high) {
  SPMD_CHECK(low <= high, "clamp: low ", low, " is above high ", high);
  return minimum(maximum(t, low), high);
}

// --- In place ------------------------------------------------------------------

Tensor& add_(Tensor& t, const Tensor& other, double alpha) {
  return binary_inplace(BinaryOp::kAdd, t, alpha == 1 ? other : mul(other, alpha));
}
Tensor& sub_(Tensor& t, const Tensor& other) { return binary_inplace(BinaryOp::kSub, t, other); }
Tensor& mul_(Tensor& t, const Tensor& other) { return binary_inplace(BinaryOp::kMul, t, other); }
Tensor& div_(Tensor& t, const Tensor& other) { return binary_inplace(BinaryOp::kDiv, t, other); }
Tensor& maximum_(Tensor& t, const Tensor& other) {
  return binary_inplace(BinaryOp::kMaximum, t, other);
}
Tensor& minimum_(Tensor& t, const Tensor& other) {
  return binary_inplace(BinaryOp::kMinimum, t, other);
}
Tensor& add_(Tensor& t, double s) { return scalar_inplace(BinaryOp::kAdd, t, s); }
Tensor& mul_(Tensor& t, double s) { return scalar_inplace(BinaryOp::kMul, t, s); }
Tensor& div_(Tensor& t, double s) { return scalar_inplace(BinaryOp::kDiv, t, s); }
Tensor& fill_(Tensor& t, double value) {
  backend_for(t.device()).fill(t, value);
  t.storage()->bump_version();
  return t;
}
Tensor& zero_(Tensor& t) { return fill_(t, 0); }

// --- Unary -----------------------------------------------------------------------

Tensor unary(UnaryOp op, const Tensor& t) {
  const DType dt = is_floating_op(op) && !is_floating(t.dtype()) ? DType::kF32 : t.dtype();
  const Tensor x = to(t, dt);
  Tensor out = empty(t.shape(), {op == UnaryOp::kLogicalNot ? DType::kBool : dt, t.device()});
  backend_for(t.device()).unary(op, x, out);
  return out;
}

Tensor& unary_(UnaryOp op, Tensor& t) {
  SPMD_CHECK(op != UnaryOp::kLogicalNot, "logical_not_: the result is bool; use logical_not");
  SPMD_CHECK(!is_floating_op(op) || is_floating(t.dtype()), op_name(op), "_: a ",
             dtype_name(t.dtype()), " tensor cannot hold the result in place");
  backend_for(t.device()).unary(op, t, t);
  t.storage()->bump_version();
  return t;
}

Tensor neg(const Tensor& t) { return unary(UnaryOp::kNeg, t); }
Tensor abs(const Tensor& t) { return unary(UnaryOp::kAbs, t); }
Tensor exp(const Tensor& t) { return unary(UnaryOp::kExp, t); }
Tensor log(const Tensor& t) { return unary(UnaryOp::kLog, t); }
Tensor sqrt(const Tensor& t) { return unary(UnaryOp::kSqrt, t); }
Tensor rsqrt(const Tensor& t) { return unary(UnaryOp::kRsqrt, t); }
Tensor tanh(const Tensor& t) { return unary(UnaryOp::kTanh, t); }
Tensor sigmoid(const Tensor& t) { return unary(UnaryOp::kSigmoid, t); }
Tensor relu(const Tensor& t) { return unary(UnaryOp::kRelu, t); }
Tensor gelu(const Tensor& t, bool approximate) {
  return unary(approximate ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf, t);
}
Tensor silu(const Tensor& t) { return unary(UnaryOp::kSilu, t); }
Tensor sin(const Tensor& t) { return unary(UnaryOp::kSin, t); }
Tensor cos(const Tensor& t) { return unary(UnaryOp::kCos, t); }
Tensor square(const Tensor& t) { return unary(UnaryOp::kSquare, t); }
Tensor reciprocal(const Tensor& t) { return unary(UnaryOp::kReciprocal, t); }
Tensor sign(const Tensor& t) { return unary(UnaryOp::kSign, t); }
Tensor logical_not(const Tensor& t) { return unary(UnaryOp::kLogicalNot, t); }

// --- Selection -------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  SPMD_CHECK(cond.dtype() == DType::kBool, "where: the condition must be bool, got ",
             dtype_name(cond.dtype()));
  check_same_device(cond, a, "where");
  check_same_device(a, b, "where");
  const Shape shape =
      broadcast_shapes(cond.shape(), broadcast_shapes(a.shape(), b.shape(), "where"), "where");
  const DType dt = promote_types(a.dtype(), b.dtype());
  Tensor out = empty(shape, {dt, a.device()});
  backend_for(a.device())
      .where(expand(cond, shape), operand(a, dt, shape), operand(b, dt, shape), out);
  return out;
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  SPMD_CHECK(mask.dtype() == DType::kBool, "masked_fill: the mask must be bool, got ",
             dtype_name(mask.dtype()));
  check_same_device(t, mask, "masked_fill");
  SPMD_CHECK(broadcast_shapes(t.shape(), mask.shape(), "masked_fill") == t.shape(),
             "masked_fill: mask of shape ", mask.shape(), " does not broadcast to ", t.shape());
  Tensor out = empty_like(t);
  backend_for(t.device()).masked_fill(t, expand(mask, t.shape()), value, out);
  return out;
}

Tensor tril(const Tensor& t, int64_t diagonal) {
  SPMD_CHECK(t.ndim() >= 2, "tril: expected at least 2 dims, got shape ", t.shape());
  Tensor out = empty_like(t);
  backend_for(t.device()).triangle(t, diagonal, false, out);
  return out;
}

Tensor triu(const Tensor& t, int64_t diagonal) {
  SPMD_CHECK(t.ndim() >= 2, "triu: expected at least 2 dims, got shape ", t.shape());
  Tensor out = empty_like(t);
  backend_for(t.device()).triangle(t, diagonal, true, out);
  return out;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  if (!(a.shape() == b.shape())) return false;
  const std::vector<double> x = to_vector<double>(a), y = to_vector<double>(b);
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i] && !(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  return true;
}

}  // namespace spmd::ops
