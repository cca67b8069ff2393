// The CUDA backend, part 2: the transformer ops, indexing, random numbers,
// the fused AdamW step and attention (cuda_backend_impl.h).
//
// Index tensors are checked on the GPU without waiting for it; a bad index
// is skipped by the op's kernel and reported at the next synchronization
// (index_errors.h).
#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/attention.h"
#include "kernels/indexing.h"
#include "kernels/nn.h"
#include "kernels/random.h"
#include "tensor/cuda/context.h"
#include "tensor/cuda/cuda_backend_impl.h"
#include "tensor/cuda/index_errors.h"

namespace spmd::cuda::detail {
namespace {

int64_t rows_of(const Tensor& x) {
  const int64_t cols = x.ndim() ? x.size(-1) : 1;
  return cols ? x.numel() / cols : 0;
}
int64_t cols_of(const Tensor& x) { return x.ndim() ? x.size(-1) : 1; }

}  // namespace

// --- Softmax and norms ------------------------------------------------------------------

void CudaBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  Launch launch(out.device());
  kernels::softmax(buffer(x, "softmax"), buffer(out, "softmax"), rows_of(x), cols_of(x), log,
                   launch.stream);
}

void CudaBackend::softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, bool log) {
  Launch launch(dx.device());
  kernels::softmax_backward(buffer(dy, "softmax_backward"), buffer(y, "softmax_backward"),
                            buffer(dx, "softmax_backward"), rows_of(y), cols_of(y), log,
                            launch.stream);
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                             const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  Launch launch(y.device());
  const char* op = "layer_norm";
  kernels::layer_norm(buffer(x, op), buffer(weight, op), buffer(bias, op), eps, buffer(y, op),
                      buffer(mean, op), buffer(rstd, op), rows_of(x), cols_of(x), launch.stream);
}

void CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                                      const Tensor& dweight, const Tensor& dbias) {
  Launch launch(x.device());
  AllocatorScratch scratch(launch.device, launch.stream);
  const char* op = "layer_norm_backward";
  kernels::layer_norm_backward(buffer(dy, op), buffer(x, op), buffer(weight, op), buffer(mean, op),
                               buffer(rstd, op), buffer(dx, op), buffer(dweight, op),
                               buffer(dbias, op), rows_of(x), cols_of(x), scratch, launch.stream);
}

void CudaBackend::rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                           const Tensor& rstd) {
  Launch launch(y.device());
  const char* op = "rms_norm";
  kernels::rms_norm(buffer(x, op), buffer(weight, op), eps, buffer(y, op), buffer(rstd, op),
                    rows_of(x), cols_of(x), launch.stream);
}

void CudaBackend::rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  Launch launch(x.device());
  AllocatorScratch scratch(launch.device, launch.stream);
  const char* op = "rms_norm_backward";
  kernels::rms_norm_backward(buffer(dy, op), buffer(x, op), buffer(weight, op), buffer(rstd, op),
                             buffer(dx, op), buffer(dweight, op), rows_of(x), cols_of(x), scratch,
                             launch.stream);
}

// --- Cross-entropy and rotary embeddings ----------------------------------------------

void CudaBackend::cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                                const Tensor& loss, const Tensor& lse) {
  Launch launch(logits.device());
  const int64_t V = cols_of(logits);
  check_indices(launch, targets, V, "cross_entropy (target)", true, ignore_index);
  const char* op = "cross_entropy";
  kernels::cross_entropy(buffer(logits, op), buffer(targets, op), ignore_index, buffer(loss, op),
                         buffer(lse, op), rows_of(logits), V, launch.stream);
}

void CudaBackend::cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                         const Tensor& lse, const Tensor& dloss,
                                         int64_t ignore_index, const Tensor& dlogits) {
  Launch launch(logits.device());
  const int64_t V = cols_of(logits), N = rows_of(logits);
  check_indices(launch, targets, V, "cross_entropy_backward (target)", true, ignore_index);
  SPMD_CHECK(dloss.numel() == N || dloss.numel() == 1, "cross_entropy_backward: dloss has ",
             dloss.numel(), " elements for ", N, " rows");
  // dloss: one value per row, or one for all (a broadcast scalar, stride 0).
  const int64_t stride = dloss.numel() == 1 ? 0 : (dloss.ndim() ? dloss.stride(-1) : 0);
  SPMD_CHECK(dloss.numel() == 1 || dloss.ndim() == 1, "cross_entropy_backward: dloss must be 1-d");
  const char* op = "cross_entropy_backward";
  kernels::cross_entropy_backward(buffer(logits, op), buffer(targets, op), buffer(lse, op),
                                  {dloss.raw_data(), scalar_type(dloss.dtype())}, stride,
                                  ignore_index, buffer(dlogits, op), N, V, launch.stream);
}

void CudaBackend::rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
                       bool inverse) {
  Launch launch(out.device());
  kernels::rope(tensor_arg(x), buffer(cos, "rope"), buffer(sin, "rope"), tensor_arg(out), inverse,
                launch.stream);
}

// --- Indexing -------------------------------------------------------------------------------

void CudaBackend::index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  Launch launch(out.device());
  check_indices(launch, index, x.size(dim), "index_select");
  kernels::index_select(tensor_arg(x), dim, tensor_arg(index), tensor_arg(out), launch.stream);
}

void CudaBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  Launch launch(out.device());
  check_indices(launch, index, out.size(dim), "index_add");
  kernels::index_add(tensor_arg(out), dim, tensor_arg(index), tensor_arg(src), launch.stream);
}

void CudaBackend::gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  Launch launch(out.device());
  check_indices(launch, index, x.size(dim), "gather");
  kernels::gather(tensor_arg(x), dim, tensor_arg(index), tensor_arg(out), launch.stream);
}

void CudaBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  Launch launch(out.device());
  check_indices(launch, index, out.size(dim), "scatter_add");
  kernels::scatter_add(tensor_arg(out), dim, tensor_arg(index), tensor_arg(src), launch.stream);
}

// --- Random numbers and AdamW -----------------------------------------------------------------

void CudaBackend::random_uniform(const Tensor& out, double low, double high, uint64_t seed,
                                 uint64_t offset) {
  Launch launch(out.device());
  kernels::random_uniform(buffer(out, "random_uniform"), out.numel(), low, high, seed, offset,
                          launch.stream);
}

void CudaBackend::random_normal(const Tensor& out, double mean, double std, uint64_t seed,
                                uint64_t offset) {
  Launch launch(out.device());
  kernels::random_normal(buffer(out, "random_normal"), out.numel(), mean, std, seed, offset,
                         launch.stream);
}

void CudaBackend::adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                             const Tensor& exp_avg_sq, const AdamWStep& hp) {
  for (const Tensor* t : {&param, &grad, &exp_avg, &exp_avg_sq}) {
    SPMD_CHECK(t->dtype() == DType::kF32 && t->is_contiguous() && t->shape() == param.shape(),
               "adamw_step: expected contiguous f32 tensors of one shape, got ", t->dtype(), " ",
               t->shape(), " for a parameter of shape ", param.shape());
  }
  SPMD_CHECK(hp.step >= 1, "adamw_step: step must be >= 1, got ", hp.step);
  Launch launch(param.device());
  kernels::AdamWParams p;
  p.beta1 = float(hp.beta1);
  p.beta2 = float(hp.beta2);
  p.eps = float(hp.eps);
  p.decay = float(1.0 - hp.lr * hp.weight_decay);
  p.step_size = float(hp.lr / (1.0 - std::pow(hp.beta1, double(hp.step))));
  p.inv_sqrt_bc2 = float(1.0 / std::sqrt(1.0 - std::pow(hp.beta2, double(hp.step))));
  kernels::adamw_step(param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                      exp_avg_sq.data<float>(), param.numel(), p, launch.stream);
}

// --- Attention: the fused kernels where they apply, else the composed default ----------------
//
// SPMD_ATTENTION chooses, for comparing implementations on a GPU: "composed"
// (the Backend default: cuBLAS and softmax), "simt" (the f32 CUDA-core fused
// kernels even where tensor cores apply), anything else or unset: automatic.

namespace {

enum class AttentionPath { kComposed, kFused };

AttentionPath attention_path(const Tensor& q, const Tensor& lse, kernels::AttentionKernel* which) {
  const char* env = std::getenv("SPMD_ATTENTION");
  const std::string choice = env ? env : "";
  *which = choice == "simt" ? kernels::AttentionKernel::kSimt : kernels::AttentionKernel::kAuto;
  const bool fits = kernels::attention_supported(tensor_arg(q)) && lse.dtype() == DType::kF32 &&
                    lse.is_contiguous();
  return fits && choice != "composed" ? AttentionPath::kFused : AttentionPath::kComposed;
}

}  // namespace

void CudaBackend::attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                            double scale, const Tensor& out, const Tensor& lse) {
  kernels::AttentionKernel which;
  if (attention_path(q, lse, &which) == AttentionPath::kComposed) {
    return Backend::attention(q, k, v, causal, scale, out, lse);
  }
  Launch launch(q.device());
  kernels::attention_forward(tensor_arg(q), tensor_arg(k), tensor_arg(v), tensor_arg(out),
                             lse.data<float>(), causal, scale, which, launch.stream);
}

void CudaBackend::attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const Tensor& out, const Tensor& lse,
                                     bool causal, double scale, const Tensor& dq, const Tensor& dk,
                                     const Tensor& dv) {
  kernels::AttentionKernel which;
  if (attention_path(q, lse, &which) == AttentionPath::kComposed) {
    return Backend::attention_backward(dout, q, k, v, out, lse, causal, scale, dq, dk, dv);
  }
  Launch launch(q.device());
  AllocatorScratch scratch(launch.device, launch.stream);
  kernels::attention_backward(tensor_arg(dout), tensor_arg(q), tensor_arg(k), tensor_arg(v),
                              tensor_arg(out), lse.data<float>(), tensor_arg(dq), tensor_arg(dk),
                              tensor_arg(dv), causal, scale, which, scratch, launch.stream);
}

}  // namespace spmd::cuda::detail
