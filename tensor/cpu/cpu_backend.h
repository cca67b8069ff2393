// The CPU backend: loops over strided memory with OpenMP across elements or
// rows, and Eigen (with OpenBLAS underneath when present) for matrix products.
//
// One class, its methods spread over one file per idea:
//   cpu_backend.cpp  memory (through allocator.h), copy/convert, fill, arange
//   elementwise.cpp  unary and binary ops (scalar_ops.cpp: integers, comparisons)
//   select.cpp       where, masked_fill, triangle
//   reduce.cpp       reductions and arg-reductions
//   matmul.cpp       GEMM through Eigen (the only Eigen GEMM translation unit)
//   nn.cpp           softmax, cross-entropy, RoPE (norm.cpp: layer and RMS norm)
//   indexing.cpp     index_select/index_add, gather/scatter_add
//   random.cpp       Philox draws and the fused AdamW step
//   attention.cpp    fused causal attention, forward and backward
// The strided-iteration helpers they share are in loops.h.
#pragma once

#include "tensor/backend.h"

namespace spmd {

Backend& cpu_backend();

namespace cpu {

class CpuBackend final : public Backend {
 public:
  DataPtr allocate(size_t nbytes, Device device) override;
  void copy(const Tensor& src, const Tensor& dst) override;

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

}  // namespace cpu
}  // namespace spmd
