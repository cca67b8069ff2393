// Mixed precision: autocast, as torch.autocast. Inside an AutocastGuard the
// matrix products (matmul, linear) convert their f32 operands to a 16-bit
// type (bf16 by default) and compute there, while the parameters stay f32
// ("master weights"): the conversion is a differentiable op, so gradients
// flow back through it and arrive in each parameter's .grad as f32. Ops that
// need range or precision (softmax, log_softmax, cross_entropy, layer_norm,
// rms_norm) convert 16-bit inputs back to f32. Everything else follows type
// promotion (a bf16 product added to an f32 residual is f32).
//
// Parameters are converted once per guard: a leaf that requires grad used
// again under the same guard (micro-batches of one step, a tied weight)
// reuses its 16-bit copy while the parameter's version is unchanged, as
// PyTorch's autocast caches them; leaving the outermost guard drops the
// copies. An in-place update (the optimizer's) bumps the version, so the
// next use converts again. REQUIRES: code that writes a parameter's memory
// behind spmd's ops bumps its storage's version.
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
// True inside an AutocastGuard of the calling thread.
bool autocast_enabled();

// The calling thread's autocast settings, and a scope that sets them and
// restores the previous ones after: activation checkpointing recomputes a
// forward under the settings it first ran with, wherever backward runs.
struct AutocastState {
  bool enabled = false;
  bool cpu = false;
  DType dtype = DType::kBF16;
};
AutocastState autocast_state();
class AutocastStateGuard {
 public:
  explicit AutocastStateGuard(const AutocastState& state);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  AutocastState previous_;
};

// t converted (differentiably) to the autocast dtype when autocast applies
// to it (an f32 tensor on a device autocast is on for); t itself otherwise.
Tensor autocast_low(const Tensor& t);
// The 16-bit copy of t to compute a product with, when autocast applies to
// t; t itself otherwise. Nothing is recorded: the op that calls this keeps t
// (the f32 master) as its input and returns t's gradient in t's dtype
// itself, so a weight gradient is written in f32 directly instead of being
// rounded to bf16 and converted back. Parameters come from the cache above.
Tensor autocast_operand(const Tensor& t);
// A 16-bit t converted to f32 while autocast is on; t itself otherwise.
Tensor autocast_f32(const Tensor& t);
}  // namespace autograd

}  // namespace spmd
