// AdamW: per-parameter moments, the fused kernel for f32, the composed
// formula otherwise.
#include "autograd/optim/adamw.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "runtime/profiler.h"
#include "tensor/ops.h"

namespace spmd::optim {

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{{std::move(params), options.lr, options.weight_decay}},
            options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer(std::move(groups)), options_(options) {
  SPMD_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1 &&
                 options.eps >= 0,
             "AdamW: betas must lie in [0, 1) and eps be >= 0, got (", options.beta1, ", ",
             options.beta2, ") and ", options.eps);
  state_.resize(num_params());
}

void AdamW::step() {
  ProfilePhaseGuard phase(ProfilePhase::kOptimizer);
  NoGradGuard no_grad;
  for_each_param([&](Tensor& p, const ParamGroup& group, size_t i) {
    if (p.grad().defined()) update(p, group, state_[i]);
  });
}

void AdamW::update(Tensor& p, const ParamGroup& group, State& s) {
  const Tensor g = p.grad();
  SPMD_CHECK(g.shape() == p.shape(), "AdamW: gradient of shape ", g.shape(), " for a parameter of ",
             "shape ", p.shape());
  if (!s.exp_avg.defined()) {
    s.exp_avg = ops::zeros_like(p);
    s.exp_avg_sq = ops::zeros_like(p);
  }
  s.step += 1;
  const AdamWStep hp{group.lr,     options_.beta1,     options_.beta2,
                     options_.eps, group.weight_decay, s.step};
  if (p.dtype() == DType::kF32 && p.is_contiguous()) {
    ops::adamw_step_(p, ops::to(g, DType::kF32), s.exp_avg, s.exp_avg_sq, hp);
  } else {
    adamw_step_composed(p, g, s.exp_avg, s.exp_avg_sq, hp);
  }
}

void adamw_step_composed(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const AdamWStep& hp) {
  const double bias1 = 1 - std::pow(hp.beta1, double(hp.step));
  const double bias2 = 1 - std::pow(hp.beta2, double(hp.step));
  ops::mul_(param, 1 - hp.lr * hp.weight_decay);
  ops::mul_(exp_avg, hp.beta1);
  ops::add_(exp_avg, grad, 1 - hp.beta1);
  ops::mul_(exp_avg_sq, hp.beta2);
  ops::add_(exp_avg_sq, ops::square(grad), 1 - hp.beta2);
  const Tensor denom = ops::add(ops::div(ops::sqrt(exp_avg_sq), std::sqrt(bias2)), hp.eps);
  ops::add_(param, ops::div(exp_avg, denom), -hp.lr / bias1);
}

TensorMap AdamW::state_dict() const {
  TensorMap out;
  for (size_t i = 0; i < state_.size(); ++i) {
    if (!state_[i].exp_avg.defined()) continue;
    const std::string key = "state." + std::to_string(i) + ".";
    out[key + "exp_avg"] = state_[i].exp_avg;
    out[key + "exp_avg_sq"] = state_[i].exp_avg_sq;
    out[key + "step"] = ops::scalar_tensor(double(state_[i].step), {DType::kI64});
  }
  return out;
}

void AdamW::load_state_dict(const TensorMap& state) {
  for (size_t i = 0; i < state_.size(); ++i) {
    const std::string key = "state." + std::to_string(i) + ".";
    auto m = state.find(key + "exp_avg"), v = state.find(key + "exp_avg_sq"),
         t = state.find(key + "step");
    if (m == state.end() || v == state.end() || t == state.end()) {
      state_[i] = State();
      continue;
    }
    state_[i] = {ops::clone(m->second), ops::clone(v->second), t->second.item<int64_t>()};
  }
}

}  // namespace spmd::optim
