// The per-thread autocast state, the conversions ops ask for, and the cache
// of parameters' 16-bit copies.
#include "autograd/autocast.h"

#include <unordered_map>

#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd {
namespace {
thread_local bool enabled = false;
thread_local bool on_cpu = false;
thread_local DType low = DType::kBF16;

// A parameter's copy in `low`, valid while the parameter's storage is at `version`.
struct CachedCopy {
  Tensor source;  // keeps the parameter alive, so its address is not reused while cached
  uint64_t version;
  Tensor copy;
};
thread_local std::unordered_map<const void*, CachedCopy> cache;  // by the parameter's data

bool applies_to(const Tensor& t) {
  return enabled && t.defined() && t.dtype() == DType::kF32 && (on_cpu || !t.is_cpu());
}
}  // namespace

AutocastGuard::AutocastGuard(DType dtype, bool cpu)
    : prev_enabled_(enabled), prev_cpu_(on_cpu), prev_dtype_(low) {
  SPMD_CHECK(is_half_float(dtype), "AutocastGuard: expected bf16 or f16, got ", dtype_name(dtype));
  if (dtype != low) cache.clear();
  enabled = true;
  on_cpu = cpu;
  low = dtype;
}

AutocastGuard::~AutocastGuard() {
  if (!prev_enabled_ || prev_dtype_ != low) cache.clear();  // leaving the region (or its dtype)
  enabled = prev_enabled_;
  on_cpu = prev_cpu_;
  low = prev_dtype_;
}

namespace autograd {

bool autocast_enabled() { return enabled; }

AutocastState autocast_state() { return {enabled, on_cpu, low}; }

AutocastStateGuard::AutocastStateGuard(const AutocastState& state) : previous_(autocast_state()) {
  if (!state.enabled || state.dtype != low) cache.clear();
  enabled = state.enabled;
  on_cpu = state.cpu;
  low = state.dtype;
}

AutocastStateGuard::~AutocastStateGuard() {
  if (!previous_.enabled || previous_.dtype != low) cache.clear();
  enabled = previous_.enabled;
  on_cpu = previous_.cpu;
  low = previous_.dtype;
}

Tensor autocast_low(const Tensor& t) { return applies_to(t) ? to(t, low) : t; }

Tensor autocast_operand(const Tensor& t) {
  if (!applies_to(t)) return t;
  if (!(t.is_leaf() && t.requires_grad())) return ops::to(t, low);
  const uint64_t version = t.storage()->version();
  auto it = cache.find(t.raw_data());
  if (it != cache.end() && it->second.source.is_same(t) && it->second.version == version &&
      it->second.copy.dtype() == low) {
    return it->second.copy;
  }
  Tensor copy = ops::to(t, low);
  cache[t.raw_data()] = {t, version, copy};
  return copy;
}

Tensor autocast_f32(const Tensor& t) {
  if (!enabled || !t.defined() || !is_half_float(t.dtype())) return t;
  return to(t, DType::kF32);
}

}  // namespace autograd
}  // namespace spmd
