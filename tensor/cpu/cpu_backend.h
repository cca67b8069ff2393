// The CPU backend: loops over strided memory with OpenMP across elements or
// rows, and Eigen (with OpenBLAS underneath when present) for matrix products.
//
// Two classes. CpuBackend holds the methods every CPU capability shares;
// each capability's KernelBackend (kernels.h) derives from it and adds the
// hot loops, compiled for that capability's vector ISA (capability.h picks
// one at start-up). The methods are spread over one file per idea:
//   cpu_backend.cpp  memory (through allocator.h), copy/convert, fill, arange
//   select.cpp       where, masked_fill, triangle
//   matmul.cpp       GEMM through Eigen (the only Eigen GEMM translation unit;
//                    blas.cpp: the OpenBLAS core)
//   indexing.cpp     index_select/index_add, gather/scatter_add
//   random.cpp       Philox draws and the fused AdamW step
// and, once per capability (kernels.h):
//   elementwise.cpp  unary and binary ops (scalar_ops.cpp: integers, comparisons)
//   reduce.cpp       reductions and arg-reductions
//   nn.cpp           softmax, cross-entropy, RoPE (norm.cpp: layer and RMS norm)
//   attention.cpp    fused causal attention, forward and backward
// The strided-iteration helpers they share are in loops.h.
#pragma once

#include "tensor/backend.h"

namespace spmd {

// The CPU backend of the capability in use (capability.h).
Backend& cpu_backend();

namespace cpu {

// The methods every capability shares. Abstract: the hot methods are
// KernelBackend's.
class CpuBackend : public Backend {
 public:
  CpuBackend();  // makes sure OpenBLAS's core is checked first (blas.h)

  DataPtr allocate(size_t nbytes, Device device) override;
  void copy(const Tensor& src, const Tensor& dst) override;

  void fill(const Tensor& out, double value) override;
  void arange(const Tensor& out, double start, double step) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void masked_fill(const Tensor& x, const Tensor& mask, double value, const Tensor& out) override;
  void triangle(const Tensor& x, int64_t diagonal, bool upper, const Tensor& out) override;

  void matmul(const Tensor& a, const Tensor& b, const Tensor& out, double alpha,
              double beta) override;

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
};

}  // namespace cpu
}  // namespace spmd
