// Differentiable elementwise ops. Each one: the raw op, then (when it must
// record) its backward as a closure over what it saved. A broadcast operand's
// gradient is summed back to its own shape (sum_to); the engine converts a
// gradient to its input's dtype when type promotion changed it.
#include "autograd/node.h"
#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd {
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

bool wants(const Tensor& t) { return t.requires_grad(); }

// The gradient of operand `t` of a broadcasting op: g summed to t's shape.
Tensor reduce_to(const Tensor& g, const Shape& shape) { return ops::sum_to(g, shape); }

// The weight of a in max(a, b): 1 where a wins, 1/2 on ties, 0 where b wins.
Tensor winner_weight(const Tensor& a, const Tensor& b, bool is_max, DType dt) {
  const Tensor wins = ops::to(is_max ? ops::gt(a, b) : ops::lt(a, b), dt);
  return ops::add(wins, ops::mul(ops::to(ops::eq(a, b), dt), 0.5));
}

Tensor extremum(const Tensor& a, const Tensor& b, bool is_max) {
  Tensor out = is_max ? ops::maximum(a, b) : ops::minimum(a, b);
  if (!autograd::needs_grad({&a, &b})) return out;
  return record(is_max ? "maximum" : "minimum", {&a, &b}, out,
                [sa = SavedTensor(a), sb = SavedTensor(b), is_max](const Tensor& g) {
                  const Tensor& a = sa.get();
                  const Tensor& b = sb.get();
                  const Tensor wa = winner_weight(a, b, is_max, g.dtype());
                  return TensorList{reduce_to(ops::mul(g, wa), a.shape()),
                                    reduce_to(ops::mul(g, ops::sub(1.0, wa)), b.shape())};
                });
}

// A unary op whose gradient is g * f(x, y) for the input x and output y.
template <class F>
Tensor unary_op(const char* name, const Tensor& x, Tensor y, bool save_x, bool save_y, F df) {
  if (!autograd::needs_grad({&x})) return y;
  SavedTensor sx(save_x ? x : Tensor()), sy(save_y ? y : Tensor());
  return record(name, {&x}, y,
                [sx, sy, df](const Tensor& g) { return TensorList{df(g, sx.get(), sy.get())}; });
}

// An activation whose backward is a fused BinaryOp of (g, x) or (g, y).
Tensor activation(const char* name, const Tensor& x, Tensor y, BinaryOp backward, bool from_y) {
  return unary_op(name, x, y, !from_y, from_y,
                  [backward, from_y](const Tensor& g, const Tensor& x, const Tensor& y) {
                    return ops::binary(backward, g, from_y ? y : x);
                  });
}

}  // namespace

// --- Binary ----------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = ops::add(a, b);
  if (!autograd::needs_grad({&a, &b})) return out;
  return record(
      "add", {&a, &b}, out,
      [sa = a.shape(), sb = b.shape(), na = wants(a), nb = wants(b)](const Tensor& g) {
        return TensorList{na ? reduce_to(g, sa) : Tensor(), nb ? reduce_to(g, sb) : Tensor()};
      });
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor out = ops::sub(a, b);
  if (!autograd::needs_grad({&a, &b})) return out;
  return record("sub", {&a, &b}, out,
                [sa = a.shape(), sb = b.shape(), na = wants(a), nb = wants(b)](const Tensor& g) {
                  return TensorList{na ? reduce_to(g, sa) : Tensor(),
                                    nb ? reduce_to(ops::neg(g), sb) : Tensor()};
                });
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::mul(a, b);
  if (!autograd::needs_grad({&a, &b})) return out;
  const bool na = wants(a), nb = wants(b);
  return record("mul", {&a, &b}, out,
                [sa = SavedTensor(nb ? a : Tensor()), sb = SavedTensor(na ? b : Tensor()),
                 shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) {
                  return TensorList{
                      sb.defined() ? reduce_to(ops::mul(g, sb.get()), shape_a) : Tensor(),
                      sa.defined() ? reduce_to(ops::mul(g, sa.get()), shape_b) : Tensor()};
                });
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor out = ops::div(a, b);
  if (!autograd::needs_grad({&a, &b})) return out;
  const bool nb = wants(b);
  return record("div", {&a, &b}, out,
                [sa = SavedTensor(nb ? a : Tensor()), sb = SavedTensor(b), na = wants(a),
                 shape_a = a.shape()](const Tensor& g) {
                  const Tensor& b = sb.get();
                  const Tensor ga = ops::div(g, b);  // d(a/b)/da = 1/b
                  Tensor gb;
                  if (sa.defined()) {  // d(a/b)/db = -a/b^2
                    gb = reduce_to(ops::neg(ops::div(ops::mul(ga, sa.get()), b)), b.shape());
                  }
                  return TensorList{na ? reduce_to(ga, shape_a) : Tensor(), gb};
                });
}

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(a, b, true); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(a, b, false); }

// --- With a scalar ---------------------------------------------------------------

Tensor add(const Tensor& t, double s) {
  return unary_op("add", t, ops::add(t, s), false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return g; });
}
Tensor sub(const Tensor& t, double s) {
  return unary_op("sub", t, ops::sub(t, s), false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return g; });
}
Tensor sub(double s, const Tensor& t) {
  return unary_op("rsub", t, ops::sub(s, t), false, false,
                  [](const Tensor& g, const Tensor&, const Tensor&) { return ops::neg(g); });
}
Tensor mul(const Tensor& t, double s) {
  return unary_op("mul", t, ops::mul(t, s), false, false,
                  [s](const Tensor& g, const Tensor&, const Tensor&) { return ops::mul(g, s); });
}
Tensor div(const Tensor& t, double s) {
  return unary_op("div", t, ops::div(t, s), false, false,
                  [s](const Tensor& g, const Tensor&, const Tensor&) { return ops::div(g, s); });
}
Tensor div(double s, const Tensor& t) {  // d(s/t)/dt = -s/t^2 = -y/t
  return unary_op("rdiv", t, ops::div(s, t), true, true,
                  [](const Tensor& g, const Tensor& x, const Tensor& y) {
                    return ops::neg(ops::div(ops::mul(g, y), x));
                  });
}
Tensor pow(const Tensor& t, double e) {  // d(t^e)/dt = e t^(e-1)
  return unary_op("pow", t, ops::pow(t, e), true, false,
                  [e](const Tensor& g, const Tensor& x, const Tensor&) {
                    return ops::mul(g, ops::mul(ops::pow(x, e - 1), e));
                  });
}
Tensor clamp(const Tensor& t, double low, double high) {
  return unary_op("clamp", t, ops::clamp(t, low, high), true, false,
                  [low, high](const Tensor& g, const Tensor& x, const Tensor&) {
                    const Tensor inside = ops::logical_and(ops::ge(x, low), ops::le(x, high));
                    return ops::masked_fill(g, ops::logical_not(inside), 0);
                  });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& t, double s) { return add(t, s); }
Tensor operator-(const Tensor& t, double s) { return sub(t, s); }
Tensor operator*(const Tensor& t, double s) { return mul(t, s); }
Tensor operator/(const Tensor& t, double s) { return div(t, s); }
Tensor operator+(double s, const Tensor& t) { return add(t, s); }
Tensor operator-(double s, const Tensor& t) { return sub(s, t); }
Tensor operator*(double s, const Tensor& t) { return mul(t, s); }
Tensor operator/(double s, const Tensor& t) { return div(s, t); }
Tensor operator-(const Tensor& t) { return neg(t); }

// --- Unary -------------------------------------------------------------------------

using Saved = const Tensor&;

Tensor neg(const Tensor& t) {
  return unary_op("neg", t, ops::neg(t), false, false,
                  [](const Tensor& g, Saved, Saved) { return ops::neg(g); });
}
Tensor abs(const Tensor& t) {
  return unary_op("abs", t, ops::abs(t), true, false,
                  [](const Tensor& g, Saved x, Saved) { return ops::mul(g, ops::sign(x)); });
}
Tensor exp(const Tensor& t) {
  return unary_op("exp", t, ops::exp(t), false, true,
                  [](const Tensor& g, Saved, Saved y) { return ops::mul(g, y); });
}
Tensor log(const Tensor& t) {
  return unary_op("log", t, ops::log(t), true, false,
                  [](const Tensor& g, Saved x, Saved) { return ops::div(g, x); });
}
Tensor sqrt(const Tensor& t) {  // d sqrt(x) = 1 / (2 sqrt(x))
  return unary_op("sqrt", t, ops::sqrt(t), false, true,
                  [](const Tensor& g, Saved, Saved y) { return ops::div(ops::mul(g, 0.5), y); });
}
Tensor rsqrt(const Tensor& t) {  // d x^(-1/2) = -1/2 x^(-3/2) = -y^3 / 2
  return unary_op("rsqrt", t, ops::rsqrt(t), false, true, [](const Tensor& g, Saved, Saved y) {
    return ops::mul(ops::mul(g, ops::mul(y, ops::square(y))), -0.5);
  });
}
Tensor square(const Tensor& t) {
  return unary_op("square", t, ops::square(t), true, false,
                  [](const Tensor& g, Saved x, Saved) { return ops::mul(ops::mul(g, x), 2.0); });
}
Tensor reciprocal(const Tensor& t) {  // d(1/x) = -1/x^2 = -y^2
  return unary_op(
      "reciprocal", t, ops::reciprocal(t), false, true,
      [](const Tensor& g, Saved, Saved y) { return ops::neg(ops::mul(g, ops::square(y))); });
}
Tensor sin(const Tensor& t) {
  return unary_op("sin", t, ops::sin(t), true, false,
                  [](const Tensor& g, Saved x, Saved) { return ops::mul(g, ops::cos(x)); });
}
Tensor cos(const Tensor& t) {
  return unary_op("cos", t, ops::cos(t), true, false, [](const Tensor& g, Saved x, Saved) {
    return ops::neg(ops::mul(g, ops::sin(x)));
  });
}
Tensor tanh(const Tensor& t) {
  return activation("tanh", t, ops::tanh(t), BinaryOp::kTanhBackward, true);
}
Tensor sigmoid(const Tensor& t) {
  return activation("sigmoid", t, ops::sigmoid(t), BinaryOp::kSigmoidBackward, true);
}
Tensor relu(const Tensor& t) {
  return activation("relu", t, ops::relu(t), BinaryOp::kReluBackward, false);
}
Tensor gelu(const Tensor& t, bool approximate) {
  return activation("gelu", t, ops::gelu(t, approximate),
                    approximate ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluErfBackward, false);
}
Tensor silu(const Tensor& t) {
  return activation("silu", t, ops::silu(t), BinaryOp::kSiluBackward, false);
}

// --- Selection -----------------------------------------------------------------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = ops::where(cond, a, b);
  if (!autograd::needs_grad({&a, &b})) return out;
  return record("where", {&a, &b}, out,
                [sc = SavedTensor(cond), sa = a.shape(), sb = b.shape(), na = wants(a),
                 nb = wants(b)](const Tensor& g) {
                  const Tensor& c = sc.get();
                  return TensorList{
                      na ? reduce_to(ops::masked_fill(g, ops::logical_not(c), 0), sa) : Tensor(),
                      nb ? reduce_to(ops::masked_fill(g, c, 0), sb) : Tensor()};
                });
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, double value) {
  Tensor out = ops::masked_fill(t, mask, value);
  if (!autograd::needs_grad({&t})) return out;
  return record("masked_fill", {&t}, out, [sm = SavedTensor(mask)](const Tensor& g) {
    return TensorList{ops::masked_fill(g, sm.get(), 0)};
  });
}

Tensor tril(const Tensor& t, int64_t diagonal) {
  return unary_op("tril", t, ops::tril(t, diagonal), false, false,
                  [diagonal](const Tensor& g, Saved, Saved) { return ops::tril(g, diagonal); });
}
Tensor triu(const Tensor& t, int64_t diagonal) {
  return unary_op("triu", t, ops::triu(t, diagonal), false, false,
                  [diagonal](const Tensor& g, Saved, Saved) { return ops::triu(g, diagonal); });
}

}  // namespace spmd
