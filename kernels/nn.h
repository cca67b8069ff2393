// The fused ops of a transformer, forward and backward: softmax, layer and
// RMS norm, cross-entropy, rotary embeddings, and the AdamW step. Each works
// on contiguous rows along the last dim (rope excepted: any strides). `x`'s
// dtype (f32, f64, bf16 or f16) is the compute dtype: rows are accumulated in
// f32 (f64 for f64); the other buffers (weights, saved statistics, targets,
// losses) may have their own dtype and are converted on load and store.
//
// One block (or warp) owns one row, reads it from global memory once for
// each statistic, and reduces across its threads with warp shuffles; the
// weight gradients of the norms, sums over all rows, are summed per chunk of
// rows and then across chunks, so the result does not depend on timing.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// y = softmax(x) (log_softmax when log) over rows of `cols` elements.
void softmax(Buffer x, Buffer y, int64_t rows, int64_t cols, bool log, Stream stream);
// dx from dy and the forward output y. x, dy, y, dx of one dtype.
void softmax_backward(Buffer dy, Buffer y, Buffer dx, int64_t rows, int64_t cols, bool log,
                      Stream stream);

// y = (x - mean) * rstd * weight + bias; mean and rstd (rows) saved.
// weight and bias may be null.
void layer_norm(Buffer x, Buffer weight, Buffer bias, double eps, Buffer y, Buffer mean,
                Buffer rstd, int64_t rows, int64_t cols, Stream stream);
// dx, and dweight and dbias (overwritten; either may be null).
void layer_norm_backward(Buffer dy, Buffer x, Buffer weight, Buffer mean, Buffer rstd, Buffer dx,
                         Buffer dweight, Buffer dbias, int64_t rows, int64_t cols, Scratch& scratch,
                         Stream stream);
// y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + eps). weight may be null.
void rms_norm(Buffer x, Buffer weight, double eps, Buffer y, Buffer rstd, int64_t rows,
              int64_t cols, Stream stream);
void rms_norm_backward(Buffer dy, Buffer x, Buffer weight, Buffer rstd, Buffer dx, Buffer dweight,
                       int64_t rows, int64_t cols, Scratch& scratch, Stream stream);

// loss[n] = lse[n] - logits[n, targets[n]] (0 where targets[n] == ignore_index)
// over logits (rows, cols). REQUIRES: targets in range (tensor/cuda checks).
void cross_entropy(Buffer logits, Buffer targets, int64_t ignore_index, Buffer loss, Buffer lse,
                   int64_t rows, int64_t cols, Stream stream);
// dlogits[n] = dloss[n * dloss_stride] * (softmax(logits[n]) - onehot(targets[n])).
void cross_entropy_backward(Buffer logits, Buffer targets, Buffer lse, Buffer dloss,
                            int64_t dloss_stride, int64_t ignore_index, Buffer dlogits,
                            int64_t rows, int64_t cols, Stream stream);

// Rotates pairs (x[.., 2i], x[.., 2i+1]) of x (..., T, H, D) by the angles of
// cos and sin (T, D/2); inverse rotates back. x and out share dtype.
void rope(const TensorArg& x, Buffer cos, Buffer sin, const TensorArg& out, bool inverse,
          Stream stream);

// One AdamW step (torch.optim.AdamW) on n contiguous f32 elements:
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param = param * decay - step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps)
// with decay = 1 - lr wd, step_size = lr / (1 - beta1^step) and
// inv_sqrt_bc2 = 1 / sqrt(1 - beta2^step) worked out on the host in f64.
struct AdamWParams {
  float beta1, beta2, eps, decay, step_size, inv_sqrt_bc2;
};
void adamw_step(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, int64_t n,
                const AdamWParams& hp, Stream stream);

}  // namespace spmd::kernels
