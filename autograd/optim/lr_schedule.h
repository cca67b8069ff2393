// Learning-rate schedules: a linear warm-up from near 0 to max_lr, then a
// decay to min_lr (cosine, or linear) by total_steps, min_lr after that.
// For step s counted from 0:
//   s < warmup:         max_lr (s + 1) / warmup
//   warmup <= s < total: min_lr + (max_lr - min_lr) f((s - warmup) / (total - warmup))
//                        with f(x) = (1 + cos(pi x)) / 2, or 1 - x for linear
//   s >= total:          min_lr
// Use: optimizer.set_lr(schedule(step)) before each optimizer.step().
#pragma once

#include <cstdint>

namespace spmd::optim {

class WarmupCosine {
 public:
  enum class Decay { kCosine, kLinear };
  WarmupCosine(double max_lr, int64_t warmup_steps, int64_t total_steps, double min_lr = 0,
               Decay decay = Decay::kCosine);
  double operator()(int64_t step) const;

 private:
  double max_lr_, min_lr_;
  int64_t warmup_, total_;
  Decay decay_;
};

}  // namespace spmd::optim
