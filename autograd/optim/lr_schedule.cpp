// Warm-up then cosine (or linear) decay.
#include "autograd/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "runtime/error.h"

namespace spmd::optim {

WarmupCosine::WarmupCosine(double max_lr, int64_t warmup_steps, int64_t total_steps, double min_lr,
                           Decay decay)
    : max_lr_(max_lr), min_lr_(min_lr), warmup_(warmup_steps), total_(total_steps), decay_(decay) {
  SPMD_CHECK(max_lr >= min_lr && min_lr >= 0 && warmup_steps >= 0 && total_steps >= warmup_steps,
             "WarmupCosine: need max_lr >= min_lr >= 0 and total_steps >= warmup_steps >= 0, got ",
             "max_lr ", max_lr, ", min_lr ", min_lr, ", warmup ", warmup_steps, ", total ",
             total_steps);
}

double WarmupCosine::operator()(int64_t step) const {
  if (step < warmup_) return max_lr_ * double(step + 1) / double(warmup_);
  if (step >= total_) return min_lr_;
  const double x = double(step - warmup_) / double(total_ - warmup_);
  const double f = decay_ == Decay::kCosine ? 0.5 * (1 + std::cos(std::numbers::pi * x)) : 1 - x;
  return min_lr_ + (max_lr_ - min_lr_) * f;
}

}  // namespace spmd::optim
