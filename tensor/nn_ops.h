// The fused ops of a transformer, forward and backward, as raw ops (autograd/
// wraps them in differentiable functions). Each works along the last dim.
#pragma once

#include <optional>

#include "tensor/backend.h"
#include "tensor/tensor.h"

namespace spmd::ops {

Tensor softmax(const Tensor& x, int dim = -1);
Tensor log_softmax(const Tensor& x, int dim = -1);
// Given y = softmax(x) (or log_softmax(x) when log), dx from dy.
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int dim = -1, bool log = false);

struct NormResult {
  Tensor y;
  Tensor mean;  // undefined for rms_norm
  Tensor rstd;  // 1/sqrt(var + eps), shape x.shape[:-1], f32 (f64 for f64 x)
};
struct NormGrads {
  Tensor dx, dweight, dbias;  // dweight, dbias undefined when the forward had none
};

// Layer norm over the last dim; weight and bias (C) may be undefined.
NormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);
NormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                              const NormResult& saved, bool has_bias);
// RMS norm over the last dim (Llama's): x / sqrt(mean(x^2) + eps) * weight.
NormResult rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);
NormGrads rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                            const NormResult& saved);

// gelu(u + bias) along the last dim, bias (C) broadcast over the rows: a
// Linear's bias and the GELU after it fused into one pass over the product
// u = x W^T (Backend::bias_gelu), equal to gelu(add(u, bias), approximate).
Tensor bias_gelu(const Tensor& u, const Tensor& bias, bool approximate = true);
struct BiasGeluGrads {
  Tensor du, dbias;  // u's shape; bias's shape
};
// The gradients of bias_gelu for an upstream dy, in one pass.
BiasGeluGrads bias_gelu_backward(const Tensor& dy, const Tensor& u, const Tensor& bias,
                                 bool approximate = true);

// Rows of `weight` (V, C) picked by integer ids of any shape: (..., C).
Tensor embedding(const Tensor& weight, const Tensor& ids);
// dweight (V, C) from d(out) (..., C): each id's rows summed.
Tensor embedding_backward(const Tensor& dout, const Tensor& ids, int64_t num_embeddings);

struct CrossEntropyResult {
  Tensor loss;   // 0-d: mean over the rows whose target is not ignore_index
  Tensor lse;    // (N,) log-sum-exp of each row, f32 (f64 for f64 logits), saved for backward
  Tensor count;  // 0-d i64 on the logits' device: the rows that were not ignored
};
// Fused log-softmax + negative log-likelihood over logits (N, V) and integer
// targets (N): what F.cross_entropy(logits, targets, ignore_index) computes.
// The loss has the logits' dtype, or `loss_dtype` when given (autocast asks
// for an f32 loss of bf16 logits: the rows are summed in f32 either way).
// Nothing waits for a GPU: the count of rows stays on the device.
CrossEntropyResult cross_entropy(const Tensor& logits, const Tensor& targets,
                                 int64_t ignore_index = -100,
                                 std::optional<DType> loss_dtype = std::nullopt);
// dlogits (of the logits' dtype) for an upstream gradient dloss of the mean
// loss: a one-element tensor (kept on the device: no wait) or a number.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              const CrossEntropyResult& saved, const Tensor& dloss,
                              int64_t ignore_index = -100);
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              const CrossEntropyResult& saved, double dloss,
                              int64_t ignore_index = -100);

// Rotary position embedding tables for head size D: cos and sin (T, D/2) with
// angle t * theta^(-2i/D).
struct RopeTables {
  Tensor cos, sin;
};
RopeTables rope_tables(int64_t T, int64_t head_dim, double theta = 10000.0,
                       Device device = Device::cpu());
// x (B, T, H, D) rotated pairwise; inverse = true undoes it (the backward).
Tensor rope(const Tensor& x, const RopeTables& tables, bool inverse = false);

// One fused AdamW step, in place on param, exp_avg and exp_avg_sq
// (torch.optim.AdamW's update; Backend::adamw_step states the formula).
// REQUIRES: four f32 tensors of one shape on one device.
void adamw_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamWStep& hp);

}  // namespace spmd::ops
