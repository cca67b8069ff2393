// Differentiable reductions and matrix products.
//
// A reduction's gradient spreads the output's gradient back over the
// elements it came from: each one gets it whole (sum), divided by the count
// (mean), or only the extreme ones get it (amax, amin; ties share it). A
// matrix product C = A B has dA = dC B^T and dB = A^T dC, with the batch dims
// that broadcast summed away; linear() folds every leading dim into one so
// that dW is one GEMM, not one per batch and a sum. Both products are on
// selective checkpointing's save list (autograd/selective_checkpoint.h).
#include "autograd/autocast.h"
#include "autograd/engine.h"
#include "autograd/node.h"
#include "autograd/selective_checkpoint.h"
#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd {
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// The reduced output's gradient, reshaped with size-1 reduced dims and
// expanded to the input's shape (no copy: stride 0 on the reduced dims).
Tensor expand_back(const Tensor& g, const Shape& in, const std::vector<int>& dims) {
  Shape kept = in;
  for (int d = 0; d < in.ndim(); ++d) {
    bool reduced = dims.empty();
    for (int dim : dims) reduced = reduced || wrap_dim(dim, in.ndim(), "sum") == d;
    if (reduced) kept[d] = 1;
  }
  // With or without keepdim, g has kept's elements in kept's order.
  return ops::expand(ops::reshape(g, kept), in);
}

int64_t reduced_count(const Shape& in, const Shape& out) {
  return out.numel() == 0 ? 0 : in.numel() / out.numel();
}

Tensor extreme(const Tensor& t, const std::vector<int>& dims, bool keepdim, bool is_max) {
  Tensor out = is_max ? ops::amax(t, dims, keepdim) : ops::amin(t, dims, keepdim);
  if (!autograd::needs_grad({&t})) return out;
  return record(is_max ? "amax" : "amin", {&t}, out,
                [st = SavedTensor(t), so = SavedTensor(out), dims](const Tensor& g) {
                  const Tensor& t = st.get();
                  const Tensor hit =
                      ops::to(ops::eq(t, expand_back(so.get(), t.shape(), dims)), g.dtype());
                  const Tensor count = ops::sum(hit, dims, true);  // ties share the gradient
                  const Tensor share = ops::div(ops::reshape(g, count.shape()), count);
                  return TensorList{ops::mul(hit, share)};
                });
}

}  // namespace

Tensor sum(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  Tensor out = ops::sum(t, dims, keepdim);
  if (!autograd::needs_grad({&t})) return out;
  return record("sum", {&t}, out, [s = t.shape(), dims](const Tensor& g) {
    return TensorList{expand_back(g, s, dims)};
  });
}

Tensor mean(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  Tensor out = ops::mean(t, dims, keepdim);
  if (!autograd::needs_grad({&t})) return out;
  const double n = double(reduced_count(t.shape(), out.shape()));
  return record("mean", {&t}, out, [s = t.shape(), dims, n](const Tensor& g) {
    return TensorList{expand_back(ops::div(g, n), s, dims)};
  });
}

Tensor amax(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return extreme(t, dims, keepdim, true);
}
Tensor amin(const Tensor& t, const std::vector<int>& dims, bool keepdim) {
  return extreme(t, dims, keepdim, false);
}

// --- Matrix products ----------------------------------------------------------------

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autograd::autocast_low(a_in), b = autograd::autocast_low(b_in);
  Tensor out = autograd::keep_or_reuse("matmul", [&] { return ops::matmul(a, b); });
  if (!autograd::needs_grad({&a, &b})) return out;
  const bool na = a.requires_grad(), nb = b.requires_grad();
  return record(
      "matmul", {&a, &b}, out,
      [sa = SavedTensor(nb ? a : Tensor()), sb = SavedTensor(na ? b : Tensor()),
       shape_a = a.shape(), shape_b = b.shape()](const Tensor& g) {
        // Work with >= 2-d operands: a vector is a row (a) or a column (b).
        auto as_matrix = [](const Tensor& t, int dim) {
          return t.ndim() == 1 ? ops::unsqueeze(t, dim) : t;
        };
        const bool a_vec = shape_a.ndim() == 1, b_vec = shape_b.ndim() == 1;
        Tensor g2 = b_vec ? ops::unsqueeze(g, -1) : g;
        if (a_vec) g2 = ops::unsqueeze(g2, -2);
        Tensor ga, gb;
        if (sb.defined() && autograd::needs_input_grad(0)) {
          const Tensor b2 = as_matrix(sb.get(), 1);
          ga = ops::matmul(g2, ops::transpose(b2, -1, -2));
          ga = ops::reshape(ops::sum_to(ga, a_vec ? Shape{1, shape_a[0]} : shape_a), shape_a);
        }
        if (sa.defined() && autograd::needs_input_grad(1)) {
          const Tensor a2 = as_matrix(sa.get(), 0);
          if (!b_vec && shape_b.ndim() == 2) {  // fold the batch: one GEMM
            const int64_t K = a2.size(-1), N = g2.size(-1);
            gb = ops::matmul(ops::transpose(ops::reshape(a2, {-1, K}), 0, 1),
                             ops::reshape(g2, {-1, N}));
          } else {
            gb = ops::matmul(ops::transpose(a2, -1, -2), g2);
            gb = ops::reshape(ops::sum_to(gb, b_vec ? Shape{shape_b[0], 1} : shape_b), shape_b);
          }
        }
        return TensorList{ga, gb};
      });
}

// Under autocast the weight and bias are converted here without recording
// (autocast_operand): the node's inputs stay the f32 masters, and the weight
// gradient is one GEMM of bf16 operands writing f32 (what a recorded
// conversion would give, rounded to bf16 first and converted back by an
// extra pass over the weight).
Tensor linear(const Tensor& x_in, const Tensor& weight, const Tensor& bias) {
  const Tensor x = autograd::autocast_low(x_in);
  const Tensor w = autograd::autocast_operand(weight), b = autograd::autocast_operand(bias);
  Tensor out = autograd::keep_or_reuse("linear", [&] { return ops::linear(x, w, b); });
  if (!autograd::needs_grad({&x, &weight, &bias})) return out;
  const bool nx = x.requires_grad(), nw = weight.requires_grad();
  const bool nb = bias.defined() && bias.requires_grad();
  // The weight itself (a leaf parameter) lets the backward add dW straight
  // into its .grad when it may (autograd::accumulable_grad).
  return record("linear", {&x, &weight, &bias}, out,
                [sx = SavedTensor(nw ? x : Tensor()), sw = SavedTensor(nx ? w : Tensor()), nb,
                 leaf = nw && weight.is_leaf() ? weight : Tensor(), in_shape = x.shape(),
                 w_dtype = weight.dtype()](const Tensor& g) {
                  const int64_t out_f = g.size(-1);
                  const Tensor g2 = ops::reshape(g, {-1, out_f});  // (N, out)
                  Tensor gx, gw, gb;
                  // A split backward asks for dx and dW in different passes.
                  if (sw.defined() && autograd::needs_input_grad(0))
                    gx = ops::reshape(ops::matmul(g2, sw.get()), in_shape);
                  if (sx.defined() && autograd::needs_input_grad(1)) {
                    const Tensor x2 = ops::reshape(sx.get(), {-1, in_shape.back()});  // (N, in)
                    const Shape w_shape{out_f, in_shape.back()};
                    const Tensor into = autograd::accumulable_grad(leaf, w_shape);
                    if (into.defined()) {  // .grad += g2^T x2, and no gradient to hand on
                      ops::matmul_out(into, ops::transpose(g2, 0, 1), x2, 1, 1);
                    } else {
                      gw = ops::empty(w_shape, {w_dtype, g.device()});
                      ops::matmul_out(gw, ops::transpose(g2, 0, 1), x2);  // (out, in), f32 if w is
                    }
                  }
                  if (nb && autograd::needs_input_grad(2)) gb = ops::sum(g2, {0});
                  return TensorList{gx, gw, gb};
                });
}

}  // namespace spmd
