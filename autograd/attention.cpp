// Scaled dot-product attention, differentiable: the raw fused pair of
// tensor/attention.h (Backend::attention and attention_backward) with a node
// that saves q, k, v, the output and the log-sum-exp.
//
//   S = scale q k^T (+ causal mask),  P = softmax(S),  O = P v
//   backward: dv = P^T dO,  dP = dO v^T,  dS = P (dP - rowsum(dO O)),
//             dq = scale dS k,  dk = scale dS^T q
//
// Grouped-query attention (fewer key/value heads than query heads) and any
// strides (q, k, v as views into one fused qkv projection) are the
// backend's business: the CPU one (tensor/cpu/attention.cpp) computes only
// the causal half of the scores, block by block, and never holds the whole
// (T, S) probability matrix; the CUDA one is a flash-attention kernel.
//
// The output and the log-sum-exp are on selective checkpointing's save list
// (autograd/selective_checkpoint.h): a recomputation takes them as they are.
#include "tensor/attention.h"

#include <cmath>

#include "autograd/nn_functional.h"
#include "autograd/node.h"
#include "autograd/selective_checkpoint.h"
#include "tensor/ops.h"

namespace spmd {
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    double scale) {
  if (scale <= 0 && q.ndim() == 4) scale = 1.0 / std::sqrt(double(q.size(3)));
  const TensorList kept = autograd::keep_or_reuse("scaled_dot_product_attention", [&] {
    ops::AttentionResult a = ops::attention(q, k, v, causal, scale);
    return TensorList{a.out, a.lse};
  });
  const ops::AttentionResult r{kept[0], kept[1]};
  if (!autograd::needs_grad({&q, &k, &v})) return r.out;
  return record(
      "scaled_dot_product_attention", {&q, &k, &v}, r.out,
      [sq = SavedTensor(q), sk = SavedTensor(k), sv = SavedTensor(v), so = SavedTensor(r.out),
       slse = SavedTensor(r.lse), causal, scale](const Tensor& dout) {
        const ops::AttentionResult saved{so.get(), slse.get()};
        ops::AttentionGrads g = ops::attention_backward(ops::to(dout, sq.get().dtype()), sq.get(),
                                                        sk.get(), sv.get(), saved, causal, scale);
        return TensorList{g.dq, g.dk, g.dv};
      });
}

}  // namespace spmd
