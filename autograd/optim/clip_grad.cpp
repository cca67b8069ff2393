// Global-norm gradient clipping.
#include "autograd/optim/clip_grad.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "runtime/profiler.h"
#include "tensor/ops.h"

namespace spmd::optim {

double local_grad_sq_sum(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  double total = 0;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    const Tensor g64 = ops::to(g, DType::kF64);
    total += ops::sum(ops::mul(g64, g64)).item<double>();
  }
  return total;
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  SPMD_CHECK(max_norm > 0, "clip_grad_norm_: max_norm must be positive, got ", max_norm);
  const double scale = max_norm / (total_norm + 1e-6);
  if (scale >= 1) return;
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (g.defined()) ops::mul_(g, scale);
  }
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::function<double(double)>& reduce) {
  ProfilePhaseGuard phase(ProfilePhase::kOptimizer);
  double sq = local_grad_sq_sum(params);
  if (reduce) sq = reduce(sq);
  const double norm = std::sqrt(sq);
  clip_grads_with_norm_(params, max_norm, norm);
  return norm;
}

}  // namespace spmd::optim
