// Differentiable wrappers of the fused nn ops: each forward saves what the
// raw backward of tensor/nn_ops.h needs (the output of a softmax, the mean
// and rstd of a norm, the log-sum-exp of a cross-entropy), and its node
// calls that backward. Attention is in attention.cpp.
#include "autograd/nn_functional.h"

#include "autograd/autocast.h"
#include "autograd/node.h"
#include "tensor/ops.h"

namespace spmd {
using autograd::record;
using autograd::SavedTensor;
using autograd::TensorList;

namespace {

Tensor softmax_impl(const Tensor& x_in, int dim, bool log) {
  const Tensor x = autograd::autocast_f32(x_in);
  Tensor y = log ? ops::log_softmax(x, dim) : ops::softmax(x, dim);
  if (!autograd::needs_grad({&x})) return y;
  return record(log ? "log_softmax" : "softmax", {&x}, y,
                [sy = SavedTensor(y), dim, log](const Tensor& g) {
                  return TensorList{ops::softmax_backward(g, sy.get(), dim, log)};
                });
}

// The statistics of a norm's forward, saved (mean undefined for RMS norm).
struct SavedNorm {
  SavedTensor mean, rstd;
  ops::NormResult get() const { return {Tensor(), mean.get(), rstd.get()}; }
};

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, true); }

Tensor layer_norm(const Tensor& x_in, const Tensor& weight, const Tensor& bias, double eps) {
  const Tensor x = autograd::autocast_f32(x_in);
  ops::NormResult r = ops::layer_norm(x, weight, bias, eps);
  if (!autograd::needs_grad({&x, &weight, &bias})) return r.y;
  return record("layer_norm", {&x, &weight, &bias}, r.y,
                [sx = SavedTensor(x), sw = SavedTensor(weight),
                 stats = SavedNorm{SavedTensor(r.mean), SavedTensor(r.rstd)},
                 has_bias = bias.defined()](const Tensor& g) {
                  ops::NormGrads d =
                      ops::layer_norm_backward(g, sx.get(), sw.get(), stats.get(), has_bias);
                  return TensorList{d.dx, d.dweight, d.dbias};
                });
}

Tensor bias_gelu(const Tensor& u, const Tensor& bias, bool approximate) {
  const Tensor b = autograd::autocast_operand(bias);
  Tensor y = ops::bias_gelu(u, b, approximate);
  if (!autograd::needs_grad({&u, &bias})) return y;
  return record("bias_gelu", {&u, &bias}, y,
                [su = SavedTensor(u), sb = SavedTensor(b), approximate,
                 bias_dtype = bias.dtype()](const Tensor& g) {
                  ops::BiasGeluGrads d =
                      ops::bias_gelu_backward(g, su.get(), sb.get(), approximate);
                  return TensorList{d.du, ops::to(d.dbias, bias_dtype)};
                });
}

Tensor rms_norm(const Tensor& x_in, const Tensor& weight, double eps) {
  const Tensor x = autograd::autocast_f32(x_in);
  ops::NormResult r = ops::rms_norm(x, weight, eps);
  if (!autograd::needs_grad({&x, &weight})) return r.y;
  return record("rms_norm", {&x, &weight}, r.y,
                [sx = SavedTensor(x), sw = SavedTensor(weight),
                 stats = SavedNorm{SavedTensor(), SavedTensor(r.rstd)}](const Tensor& g) {
                  ops::NormGrads d = ops::rms_norm_backward(g, sx.get(), sw.get(), stats.get());
                  return TensorList{d.dx, d.dweight};
                });
}

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  Tensor out = ops::embedding(weight, ids);
  if (!autograd::needs_grad({&weight})) return out;
  return record("embedding", {&weight}, out,
                [si = SavedTensor(ids), V = weight.size(0)](const Tensor& g) {
                  return TensorList{ops::embedding_backward(g, si.get(), V)};
                });
}

// Under autocast, 16-bit logits are not converted to f32 first (as PyTorch
// does): the fused kernels read them and compute in f32 anyway, and only the
// loss is asked for in f32. At GPT-2's vocabulary the logits are the largest
// tensors of a step, and the conversion would cost a pass over them each way.
// The backward takes the incoming gradient as a tensor: nothing waits for
// the GPU.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  SPMD_CHECK(logits.ndim() >= 1 && logits.ndim() == targets.ndim() + 1,
             "cross_entropy: expected logits (..., V) and targets (...), got ", logits.shape(),
             " and ", targets.shape());
  const int64_t V = logits.size(-1);
  const Tensor x = ops::reshape(logits, {-1, V});
  const Tensor t = ops::reshape(targets, {-1});
  std::optional<DType> loss_dtype;
  if (autograd::autocast_enabled() && is_half_float(logits.dtype())) loss_dtype = DType::kF32;
  ops::CrossEntropyResult r = ops::cross_entropy(x, t, ignore_index, loss_dtype);
  if (!autograd::needs_grad({&logits})) return r.loss;
  return record("cross_entropy", {&logits}, r.loss,
                [sx = SavedTensor(x), st = SavedTensor(t), lse = SavedTensor(r.lse),
                 count = r.count, shape = logits.shape(), ignore_index](const Tensor& g) {
                  const ops::CrossEntropyResult saved{Tensor(), lse.get(), count};
                  const Tensor d =
                      ops::cross_entropy_backward(sx.get(), st.get(), saved, g, ignore_index);
                  return TensorList{ops::view(d, shape)};
                });
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const ops::RopeTables tables{cos, sin};
  Tensor out = ops::rope(x, tables);
  if (!autograd::needs_grad({&x})) return out;
  return record("rope", {&x}, out, [tables](const Tensor& g) {
    return TensorList{ops::rope(g, tables, /*inverse=*/true)};
  });
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  SPMD_CHECK(p >= 0 && p < 1, "dropout: p must lie in [0, 1), got ", p);
  if (!training || p == 0) return x;
  // keep / (1 - p): 0 for a dropped element, 1/(1-p) for a kept one.
  const Tensor u = ops::rand(x.shape(), {x.dtype(), x.device()}, gen);
  const Tensor scale = ops::mul(ops::to(ops::ge(u, p), x.dtype()), 1.0 / (1.0 - p));
  Tensor out = ops::mul(x, scale);
  if (!autograd::needs_grad({&x})) return out;
  return record("dropout", {&x}, out, [ss = SavedTensor(scale)](const Tensor& g) {
    return TensorList{ops::mul(g, ss.get())};
  });
}

}  // namespace spmd
