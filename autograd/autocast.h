// Mixed precision: autocast, as torch.autocast. Inside an AutocastGuard the
// matrix products (matmul, linear) convert their f32 operands to a 16-bit
// type (bf16 by default) and compute there, while the parameters stay f32
// ("master weights"): the conversion is a differentiable op, so gradients
// flow back through it and arrive in each parameter's .grad as f32. Ops that
// need range or precision (softmax, log_softmax, cross_entropy, layer_norm,
// rms_norm) convert 16-bit inputs back to f32. Everything else follows type
// promotion (a bf16 product added to an f32 residual is f32).
//
// It is effective on CUDA, where bf16 GEMMs run on tensor cores at several
// times the f32 rate. On the CPU it is off unless asked for (cpu = true):
// the CPU backend multiplies bf16 through f32 copies, so it only costs time
// there, but the option lets tests exercise the same code on any machine.
// The state is per thread, like grad mode.
#pragma once

#include "tensor/tensor.h"

namespace spmd {

class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype = DType::kBF16, bool cpu = false);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_, prev_cpu_;
  DType prev_dtype_;
};

namespace autograd {
// t converted (differentiably) to the autocast dtype when autocast applies
// to it (an f32 tensor on a device autocast is on for); t itself otherwise.
Tensor autocast_low(const Tensor& t);
// A 16-bit t converted to f32 while autocast is on; t itself otherwise.
Tensor autocast_f32(const Tensor& t);
}  // namespace autograd

}  // namespace spmd
