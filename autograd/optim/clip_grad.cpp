// Global-norm gradient clipping.
#include "autograd/optim/clip_grad.h"

#include <algorithm>
#include <cmath>

#include "autograd/grad_mode.h"
#include "runtime/profiler.h"
#include "tensor/ops.h"

namespace spmd::optim {

double local_grad_sq_sum(const std::vector<Tensor>& params) {
  NoGradGuard no_grad;
  // The sum stays on the gradients' device until the end: one read back.
  Tensor total;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    // A slice at a time: the f64 copy and its square held at once are a
    // slice's (16 MiB), not a whole gradient's (a 128K-word embedding's
    // would be 16 bytes an element, 8.4 GB for Llama 3.1 8B's).
    const Tensor flat = ops::reshape(g, {g.numel()});
    for (int64_t at = 0; at < flat.numel(); at += kSquaresSlice) {
      const Tensor g64 = ops::to(
          ops::narrow(flat, 0, at, std::min(kSquaresSlice, flat.numel() - at)), DType::kF64);
      const Tensor squares = ops::sum(ops::mul(g64, g64));
      total = total.defined() ? ops::add(total, squares) : squares;
    }
  }
  return total.defined() ? total.item<double>() : 0.0;
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
