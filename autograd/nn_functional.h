// The differentiable neural-network ops (torch.nn.functional): fused kernels
// of tensor/nn_ops.h with their backward, dropout, and scaled dot-product
// attention. Like tensor_ops.h, each has a row in the gradient-check table.
#pragma once

#include "tensor/nn_ops.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace spmd {

Tensor softmax(const Tensor& x, int dim = -1);
Tensor log_softmax(const Tensor& x, int dim = -1);

// Over the last dim; weight and bias (C) may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

// gelu(u + bias) along the last dim, bias (C): a Linear's bias and the GELU
// after it in one pass (ops::bias_gelu), so that
//   bias_gelu(linear(x, w), b) == gelu(linear(x, w, b), approximate)
// with the product written once and read once.
Tensor bias_gelu(const Tensor& u, const Tensor& bias, bool approximate = true);

// Rows of weight (V, C) at integer ids of any shape: (..., C).
Tensor embedding(const Tensor& weight, const Tensor& ids);

// Mean negative log-likelihood of the targets under softmax(logits), fused:
// logits (..., V), targets (...) integers; rows whose target is ignore_index
// count for nothing. A 0-d tensor, as F.cross_entropy(..., reduction="mean"),
// of the logits' dtype; f32 under autocast (computed from the 16-bit logits
// as they are, in f32).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);

// Rotary position embedding of x (B, T, H, D) with the tables cos and sin
// (at least T, D/2) of ops::rope_tables. (Tables are passed as two tensors
// rather than an ops::RopeTables, so that a call never also finds ops::rope.)
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin);

// Zeroes each element with probability p and scales the rest by 1/(1-p) while
// training; the identity otherwise. Draws from `gen` (the default generator
// when null).
Tensor dropout(const Tensor& x, double p, bool training, Generator* gen = nullptr);

// softmax(scale q k^T + mask) v for q (B, H, T, D), k and v (B, Hkv, S, D),
// H a multiple of Hkv (grouped-query attention: query head h reads key head
// h / (H / Hkv)). causal hides key j from query i when j > i. scale <= 0
// means 1/sqrt(D). Any strides (the heads may be views into one fused qkv).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = true, double scale = 0);

}  // namespace spmd
