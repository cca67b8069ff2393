// The Optimizer base: groups, zero_grad, the learning rate.
#include "autograd/optim/optimizer.h"

#include "runtime/profiler.h"
#include "tensor/ops.h"

namespace spmd::optim {

Optimizer::Optimizer(std::vector<ParamGroup> groups) : groups_(std::move(groups)) {
  SPMD_CHECK(!groups_.empty(), "optimizer: got no parameter groups");
  for (const ParamGroup& g : groups_) {
    SPMD_CHECK(g.lr >= 0 && g.weight_decay >= 0, "optimizer: invalid lr ", g.lr,
               " or weight_decay ", g.weight_decay);
    for (const Tensor& p : g.params) {
      SPMD_CHECK(p.defined() && p.is_leaf() && is_floating(p.dtype()),
                 "optimizer: parameters must be floating-point leaf tensors");
    }
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  ProfilePhaseGuard phase(ProfilePhase::kOptimizer);
  for (ParamGroup& g : groups_) {
    for (Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
      } else {
        ops::zero_(grad);
      }
    }
  }
}

void Optimizer::set_lr(double lr) {
  SPMD_CHECK(lr >= 0, "optimizer: negative learning rate ", lr);
  for (ParamGroup& g : groups_) g.lr = lr;
}

size_t Optimizer::num_params() const {
  size_t n = 0;
  for (const ParamGroup& g : groups_) n += g.params.size();
  return n;
}

}  // namespace spmd::optim
