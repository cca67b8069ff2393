// Bias + GELU: the raw ops of tensor/nn_ops.h, and the default
// implementation of Backend::bias_gelu and bias_gelu_backward, composed of
// the interface's other methods so that every backend has it.
//
// An MLP's first Linear adds its bias to the product and GELU reads the sum
// back; fused, the product is written once without the bias (the GEMM does
// not read its output first) and one pass turns it into the activation:
//
//   forward:  y = gelu(u + b)                         u = x W^T, (rows, C)
//   backward: du = dy * gelu'(u + b),  db = sum over rows of du
//
// The backward recomputes u + b instead of saving it: the product u is what
// autograd keeps (as the unfused GELU keeps its input). The composition
// below is the textbook one (an add, then the activation; the activation's
// backward, then a sum over the rows); it holds the sum u + b as a tensor.
#include <utility>

#include "tensor/backend.h"
#include "tensor/backend_tensor.h"
#include "tensor/copy.h"
#include "tensor/factory.h"
#include "tensor/nn_ops.h"
#include "tensor/views.h"

namespace spmd {
namespace {

// bias (C) as a view of u's shape: stride 0 over the rows.
Tensor bias_rows(const Tensor& bias, const Tensor& u) {
  Shape strides = contiguous_strides(u.shape());
  for (int d = 0; d + 1 < u.ndim(); ++d) strides[d] = 0;
  return Tensor(bias.storage(), u.shape(), strides, bias.offset(), bias.dtype());
}

// u + bias, materialized.
Tensor biased(Backend& be, const Tensor& u, const Tensor& bias) {
  Tensor pre = empty_on(be, u.device(), u.shape(), u.dtype());
  be.binary(BinaryOp::kAdd, u, bias_rows(bias, u), pre);
  return pre;
}

}  // namespace

void Backend::bias_gelu(const Tensor& u, const Tensor& bias, bool approximate, const Tensor& y) {
  unary(approximate ? UnaryOp::kGeluTanh : UnaryOp::kGeluErf, biased(*this, u, bias), y);
}

void Backend::bias_gelu_backward(const Tensor& dy, const Tensor& u, const Tensor& bias,
                                 bool approximate, const Tensor& du, const Tensor& dbias) {
  const BinaryOp op = approximate ? BinaryOp::kGeluTanhBackward : BinaryOp::kGeluErfBackward;
  binary(op, dy, biased(*this, u, bias), du);
  const int64_t C = u.size(-1), rows = C ? u.numel() / C : 0;
  const Tensor du2(du.storage(), {rows, C}, contiguous_strides({rows, C}), du.offset(), du.dtype());
  const Tensor db2(dbias.storage(), {1, C}, contiguous_strides({1, C}), dbias.offset(),
                   dbias.dtype());
  reduce(Reduction::kSum, du2, db2);
}

namespace ops {
namespace {

// u's last dim against bias (C), both floating, one device; returns bias as u's dtype.
Tensor checked_bias(const Tensor& u, const Tensor& bias, const char* op) {
  SPMD_CHECK(is_floating(u.dtype()) && u.ndim() >= 1, op, ": expected a floating tensor of at ",
             "least 1 dim, got ", dtype_name(u.dtype()), " ", u.shape());
  SPMD_CHECK(bias.defined() && bias.ndim() == 1 && bias.size(0) == u.size(-1), op, ": bias ",
             bias.defined() ? bias.shape() : Shape{}, " does not match the last dim of ",
             u.shape());
  SPMD_CHECK(bias.device() == u.device(), op, ": bias is on ", bias.device(), ", u on ",
             u.device());
  return contiguous(to(bias, u.dtype()));
}

}  // namespace

Tensor bias_gelu(const Tensor& u_in, const Tensor& bias, bool approximate) {
  const Tensor b = checked_bias(u_in, bias, "bias_gelu");
  const Tensor u = contiguous(u_in);
  Tensor y = empty_like(u);
  backend_for(u.device()).bias_gelu(u, b, approximate, y);
  return y;
}

BiasGeluGrads bias_gelu_backward(const Tensor& dy, const Tensor& u_in, const Tensor& bias,
                                 bool approximate) {
  const Tensor b = checked_bias(u_in, bias, "bias_gelu_backward");
  SPMD_CHECK(dy.shape() == u_in.shape(), "bias_gelu_backward: dy ", dy.shape(), " vs u ",
             u_in.shape());
  const Tensor u = contiguous(u_in), g = contiguous(to(dy, u.dtype()));
  BiasGeluGrads grads{empty_like(u), empty({u.size(-1)}, {u.dtype(), u.device()})};
  backend_for({&g, &u, &b}, "bias_gelu_backward")
      .bias_gelu_backward(g, u, b, approximate, grads.du, grads.dbias);
  return grads;
}

}  // namespace ops
}  // namespace spmd
