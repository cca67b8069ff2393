// CheckpointWrapper: a module whose forward is checkpoint(inner's forward).
#include "autograd/nn/checkpoint_wrapper.h"

#include "autograd/checkpoint.h"

namespace spmd::nn {

CheckpointWrapper::CheckpointWrapper(std::shared_ptr<Module> inner) : inner_(std::move(inner)) {
  register_module("", inner_);
}

Tensor CheckpointWrapper::forward(const Tensor& x) {
  return autograd::checkpoint([this](const Tensor& in) { return (*inner_)(in); }, x);
}

void apply_activation_checkpointing(ModuleList& layers) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (dynamic_cast<CheckpointWrapper*>(layers.at(i).get())) continue;
    layers.set(i, std::make_shared<CheckpointWrapper>(layers.at(i)));
  }
}

}  // namespace spmd::nn
