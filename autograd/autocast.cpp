// The per-thread autocast state and the two conversions ops ask for.
#include "autograd/autocast.h"

#include "autograd/tensor_ops.h"

namespace spmd {
namespace {
thread_local bool enabled = false;
thread_local bool on_cpu = false;
thread_local DType low = DType::kBF16;
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool cpu)
    : prev_enabled_(enabled), prev_cpu_(on_cpu), prev_dtype_(low) {
  SPMD_CHECK(is_half_float(dtype), "AutocastGuard: expected bf16 or f16, got ", dtype_name(dtype));
  enabled = true;
  on_cpu = cpu;
  low = dtype;
}

AutocastGuard::~AutocastGuard() {
  enabled = prev_enabled_;
  on_cpu = prev_cpu_;
  low = prev_dtype_;
}

namespace autograd {

Tensor autocast_low(const Tensor& t) {
  if (!enabled || !t.defined() || t.dtype() != DType::kF32) return t;
  if (t.is_cpu() && !on_cpu) return t;
  return to(t, low);
}

Tensor autocast_f32(const Tensor& t) {
  if (!enabled || !t.defined() || !is_half_float(t.dtype())) return t;
  return to(t, DType::kF32);
}

}  // namespace autograd
}  // namespace spmd
