// Scaled dot-product attention, differentiable.
//
//   S = scale q k^T (+ causal mask)   (B, H, T, S)
//   P = softmax(S)                    rows sum to 1
//   O = P v                           (B, H, T, D)
//
// and backward, from dO:
//
//   dv = P^T dO,  dP = dO v^T,  dS = P * (dP - rowsum(dP * P)),
//   dq = scale dS k,  dk = scale dS^T q.
//
// Grouped-query attention repeats each key/value head H/Hkv times for the
// forward and sums the repeated heads' gradients back. The causal mask sets
// the scores of future keys to -inf before the softmax, so their
// probabilities, and every gradient through them, are exactly 0.
#include "autograd/node.h"
#include "autograd/nn_functional.h"
#include "tensor/ops.h"

#include <cmath>
#include <limits>

namespace spmd {
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

// k or v (B, Hkv, S, D) with each head repeated `rep` times: (B, Hkv*rep, S, D).
Tensor repeat_heads(const Tensor& t, int64_t rep) {
  if (rep == 1) return t;
  const int64_t B = t.size(0), Hkv = t.size(1), S = t.size(2), D = t.size(3);
  return ops::reshape(ops::expand(ops::unsqueeze(t, 2), {B, Hkv, rep, S, D}),
                      {B, Hkv * rep, S, D});
}

// The gradient of repeat_heads: the repeated heads summed.
Tensor sum_heads(const Tensor& g, int64_t rep) {
  if (rep == 1) return g;
  const int64_t B = g.size(0), H = g.size(1), S = g.size(2), D = g.size(3);
  return ops::sum(ops::view(ops::contiguous(g), {B, H / rep, rep, S, D}), {2});
}

void check_attention(const Tensor& q, const Tensor& k, const Tensor& v) {
  SPMD_CHECK(q.ndim() == 4 && k.ndim() == 4 && v.ndim() == 4,
             "scaled_dot_product_attention: expected q, k, v of 4 dims (B, H, T, D), got ",
             q.shape(), ", ", k.shape(), ", ", v.shape());
  SPMD_CHECK(k.shape() == v.shape() && q.size(0) == k.size(0) && q.size(3) == k.size(3) &&
                 k.size(1) > 0 && q.size(1) % k.size(1) == 0,
             "scaled_dot_product_attention: q ", q.shape(), " and k, v ", k.shape(), ", ",
             v.shape(), " do not match (k and v equal, same B and D, H a multiple of Hkv)");
}

// The probabilities P (B, H, T, S) of the forward.
Tensor attention_probs(const Tensor& q, const Tensor& k, bool causal, double scale) {
  const int64_t T = q.size(2), S = k.size(2);
  Tensor scores = ops::empty({q.size(0), q.size(1), T, S}, {q.dtype(), q.device()});
  ops::matmul_out(scores, q, ops::transpose(k, -1, -2), scale, 0);
  if (causal) {  // hide key j > i: the strict upper triangle
    const Tensor future = ops::triu(ops::ones({T, S}, {DType::kBool, q.device()}), 1);
    scores = ops::masked_fill(scores, future, -std::numeric_limits<double>::infinity());
  }
  return ops::softmax(scores, -1);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale) {
  check_attention(q, k, v);
  if (scale <= 0) scale = 1.0 / std::sqrt(double(q.size(3)));
  const int64_t rep = q.size(1) / k.size(1);
  const Tensor kr = repeat_heads(k, rep), vr = repeat_heads(v, rep);
  const Tensor p = attention_probs(q, kr, causal, scale);
  Tensor out = ops::matmul(p, vr);
  if (!autograd::needs_grad({&q, &k, &v})) return out;
  return record("scaled_dot_product_attention", {&q, &k, &v}, out,
                [sq = SavedTensor(q), sk = SavedTensor(kr), sv = SavedTensor(vr),
                 sp = SavedTensor(p), rep, scale](const Tensor& dout) {
                  const Tensor& p = sp.get();
                  const Tensor dv = ops::matmul(ops::transpose(p, -1, -2), dout);
                  const Tensor dp = ops::matmul(dout, ops::transpose(sv.get(), -1, -2));
                  const Tensor ds = ops::softmax_backward(dp, p, -1);
                  Tensor dq = ops::empty(sq.get().shape(), {dout.dtype(), dout.device()});
                  ops::matmul_out(dq, ds, sk.get(), scale, 0);
                  Tensor dk = ops::empty(sk.get().shape(), {dout.dtype(), dout.device()});
                  ops::matmul_out(dk, ops::transpose(ds, -1, -2), sq.get(), scale, 0);
                  return TensorList{dq, sum_heads(dk, rep), sum_heads(dv, rep)};
                });
}

}  // namespace spmd
