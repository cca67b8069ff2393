// AdamW (Loshchilov & Hutter), with torch.optim.AdamW's semantics: decoupled
// weight decay, bias-corrected moments, eps added after the square root.
// For step t (from 1) with gradient g:
//   p *= 1 - lr wd
//   m = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// f32 parameters take the fused one-pass kernel (ops::adamw_step_); others
// (f64) the same formula in separate raw ops, which is also the reference the
// fused kernel is tested against.
#pragma once

#include "autograd/optim/optimizer.h"
#include "tensor/backend.h"

namespace spmd::optim {

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options);
  // Groups carry their own lr and weight decay (no decay for norms and biases, say).
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);
  void step() override;
  TensorMap state_dict() const override;
  void load_state_dict(const TensorMap& state) override;

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;  // m and v, allocated on the parameter's first step
    int64_t step = 0;
  };
  void update(Tensor& p, const ParamGroup& group, State& s);

  AdamWOptions options_;
  std::vector<State> state_;
};

// The update above in separate raw ops (any floating dtype).
void adamw_step_composed(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const AdamWStep& hp);

}  // namespace spmd::optim
