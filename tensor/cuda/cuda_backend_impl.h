// The CUDA backend's class. Each method makes the tensors' device current,
// takes its current stream, turns the tensors into kernels/' descriptions
// and queues the kernel; nothing waits for the GPU except copies to the host
// and the range checks of index tensors (whose answer must come back before
// the op may go on). Its methods are split by topic over cuda_backend.cpp
// (memory, elementwise, reductions, matmul) and cuda_backend_nn.cpp (the
// transformer ops, indexing, random numbers, AdamW, attention).
#pragma once

#include "tensor/backend.h"

namespace spmd::cuda::detail {

class CudaBackend final : public Backend {
 public:
  DataPtr allocate(size_t nbytes, Device device) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void synchronize(Device device) override;

  void fill(const Tensor& out, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out,
                     bool scalar_first) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void masked_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out) override;
  void triangle(const Tensor& x, int64_t diagonal, bool upper, const Tensor& out) override;

  void reduce(Reduction op, const Tensor& x, const Tensor& out) override;
  void arg_reduce(bool is_max, const Tensor& x, int dim, const Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
              double beta) override;

  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& dy, const Tensor& y, const Tensor& dx, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& y, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias) override;
  void rms_norm(const Tensor& x, const Tensor& weight, double eps, const Tensor& y,
                const Tensor& rstd) override;
  void rms_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dweight) override;
  void cross_entropy(const Tensor& logits, const Tensor& targets, int64_t ignore_index,
                     const Tensor& loss, const Tensor& lse) override;
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                              const Tensor& dloss, int64_t ignore_index,
                              const Tensor& dlogits) override;
  void rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& out,
            bool inverse) override;

  void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;

  void random_uniform(const Tensor& out, double low, double high, uint64_t seed,
                      uint64_t offset) override;
  void random_normal(const Tensor& out, double mean, double std, uint64_t seed,
                     uint64_t offset) override;
  void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                  const Tensor& exp_avg_sq, const AdamWStep& hp) override;

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                 const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, bool causal, double scale,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv) override;
};

}  // namespace spmd::cuda::detail
