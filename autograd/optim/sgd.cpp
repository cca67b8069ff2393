// SGD: one pass of raw in-place ops per parameter.
#include "autograd/optim/sgd.h"

#include "autograd/grad_mode.h"
#include "runtime/profiler.h"
#include "tensor/ops.h"

namespace spmd::optim {

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : Optimizer({ParamGroup{std::move(params), options.lr, options.weight_decay}}),
      options_(options) {
  SPMD_CHECK(options.momentum >= 0 && (!options.nesterov || options.momentum > 0), "SGD: momentum ",
             options.momentum, " must be >= 0 (and > 0 for nesterov)");
  momentum_.resize(num_params());
}

void SGD::step() {
  ProfilePhaseGuard phase(ProfilePhase::kOptimizer);
  NoGradGuard no_grad;
  for_each_param([&](Tensor& p, const ParamGroup& group, size_t i) {
    if (!p.grad().defined()) return;
    Tensor g = p.grad();
    if (group.weight_decay != 0) g = ops::add(g, ops::mul(p, group.weight_decay));
    if (options_.momentum != 0) {
      Tensor& buf = momentum_[i];
      if (!buf.defined()) {
        buf = ops::clone(g);
      } else {
        ops::mul_(buf, options_.momentum);
        ops::add_(buf, g, 1 - options_.dampening);
      }
      g = options_.nesterov ? ops::add(g, ops::mul(buf, options_.momentum)) : buf;
    }
    ops::add_(p, g, -group.lr);
  });
}

TensorMap SGD::state_dict() const {
  TensorMap out;
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined())
      out["state." + std::to_string(i) + ".momentum_buffer"] = momentum_[i];
  return out;
}

void SGD::load_state_dict(const TensorMap& state) {
  for (size_t i = 0; i < momentum_.size(); ++i) {
    auto it = state.find("state." + std::to_string(i) + ".momentum_buffer");
    momentum_[i] = it == state.end() ? Tensor() : ops::clone(it->second);
  }
}

}  // namespace spmd::optim
