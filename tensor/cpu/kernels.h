// The CPU backend's hot loops, compiled once per capability (capability.h).
//
// elementwise.cpp, reduce.cpp, norm.cpp, nn.cpp, fused.cpp, attention.cpp
// and kernels.cpp are compiled once for each capability, with its -march flags
// and SPMD_CPU_CAP naming its namespace (avx2, avx512, generic): each copy
// defines spmd::cpu::<cap>::KernelBackend, the CpuBackend with these methods,
// and one C symbol, spmd_cpu_backend_<cap>, that returns its instance.
//
// One rule keeps the copies apart. An inline function or template the
// copies share (Eigen's, the standard library's, loops.h's) is compiled into
// each with its own flags, and the linker would keep any one of them; the
// avx2 kernels could then call an AVX-512 copy. So the kernels of every
// capability whose flags differ from the library's are sealed: linked into
// one relocatable object whose only global symbol is spmd_cpu_backend_<cap>
// (tensor/CMakeLists.txt), and their copies of shared code stay their own.
#pragma once

#ifndef SPMD_CPU_CAP
#error "tensor/cpu/kernels.h: compile as one of a capability's kernel files (tensor/CMakeLists.txt)"
#endif

#include "tensor/cpu/cpu_backend.h"

namespace spmd::cpu::SPMD_CPU_CAP {

class KernelBackend final : public CpuBackend {
 public:
  void unary(UnaryOp op, const Tensor& x, const Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out,
                     bool scalar_first) override;

  void reduce(Reduction op, const Tensor& x, const Tensor& out) override;
  void arg_reduce(bool is_max, const Tensor& x, int dim, const Tensor& out) override;

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

  void bias_gelu(const Tensor& u, const Tensor& bias, bool approximate, const Tensor& y) override;
  void bias_gelu_backward(const Tensor& dy, const Tensor& u, const Tensor& bias, bool approximate,
                          const Tensor& du, const Tensor& dbias) override;

  void attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, double scale,
                 const Tensor& out, const Tensor& lse) override;
  void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& out, const Tensor& lse, bool causal, double scale,
                          const Tensor& dq, const Tensor& dk, const Tensor& dv) override;
};

}  // namespace spmd::cpu::SPMD_CPU_CAP
