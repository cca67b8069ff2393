// Scaled dot-product attention as a raw op (no autograd): PyTorch's
// F.scaled_dot_product_attention for the causal and the unmasked case, with
// grouped-query attention, forward and backward. autograd/ wraps the pair in
// a differentiable function. The saved log-sum-exp is what lets results
// computed block by block (as ring attention's are) be merged exactly.
#pragma once

#include "tensor/tensor.h"

namespace spmd::ops {

// On the CPU, out and the gradients are (B, H, T, D) views of contiguous
// (B, T, H, D) tensors (heads side by side, as the model's projections hold
// them), so that merging the heads back needs no copy; elsewhere contiguous.
struct AttentionResult {
  Tensor out;  // (B, H, T, D), q's dtype
  Tensor lse;  // (B, H, T) f32: log of each row's softmax denominator
};
struct AttentionGrads {
  Tensor dq, dk, dv;
};

// softmax(scale q k^T [+ causal mask]) v for q (B, H, T, D), k and v
// (B, Hkv, S, D) with H % Hkv == 0; scale < 0 means 1/sqrt(D). Throws
// naming the shapes when they do not fit, or the devices when they differ.
AttentionResult attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                          double scale = -1);
// Gradients for an upstream gradient dout of out.
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const AttentionResult& saved, bool causal,
                                  double scale = -1);

}  // namespace spmd::ops
