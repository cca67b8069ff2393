// Activation checkpointing as a module wrapper: CheckpointWrapper(block)
// runs the block through autograd::checkpoint, so the block's activations
// are recomputed in backward instead of kept. The wrapped module is a
// transparent child (registered under the empty name): its parameters keep
// their names, so "layers.3.attn.wqkv.weight" stays what it was.
//
//   apply_activation_checkpointing(*model.layers);   // every block
#pragma once

#include "autograd/nn/module.h"

namespace spmd::nn {

class CheckpointWrapper : public Module {
 public:
  explicit CheckpointWrapper(std::shared_ptr<Module> inner);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override {
    return "CheckpointWrapper(" + inner_->type_name() + ")";
  }
  Module& inner() { return *inner_; }

 private:
  std::shared_ptr<Module> inner_;
};

// Wraps every element of `layers` that is not wrapped yet.
void apply_activation_checkpointing(ModuleList& layers);

}  // namespace spmd::nn
