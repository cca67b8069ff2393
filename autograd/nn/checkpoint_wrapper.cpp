// CheckpointWrapper: a module whose forward is checkpoint(inner's forward).
#include "autograd/nn/checkpoint_wrapper.h"

namespace spmd::nn {

CheckpointWrapper::CheckpointWrapper(std::shared_ptr<Module> inner,
                                     autograd::CheckpointPolicy policy)
    : inner_(std::move(inner)), policy_(policy) {
  register_module("", inner_);
}

Tensor CheckpointWrapper::forward(const Tensor& x) {
  return autograd::checkpoint([this](const Tensor& in) { return (*inner_)(in); }, x, policy_);
}

void apply_activation_checkpointing(ModuleList& layers, const CheckpointOptions& options) {
  SPMD_CHECK(options.every >= 1, "apply_activation_checkpointing: every must be at least 1, got ",
             options.every);
  for (size_t i = 0; i < layers.size(); ++i) {
    if ((int64_t(i) + 1) % options.every != 0) continue;
    if (dynamic_cast<CheckpointWrapper*>(layers.at(i).get())) continue;
    layers.set(i, std::make_shared<CheckpointWrapper>(layers.at(i), options.policy));
  }
}

}  // namespace spmd::nn
