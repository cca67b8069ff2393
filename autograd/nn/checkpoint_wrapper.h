// Activation checkpointing as a module wrapper: CheckpointWrapper(block)
// runs the block through autograd::checkpoint, so the block's activations
// are recomputed in backward instead of kept: all of them, or under
// CheckpointPolicy::kSaveProducts all but the products' outputs. The
// wrapped module is a transparent child (registered under the empty name):
// its parameters keep their names, so "layers.3.attn.wqkv.weight" stays
// what it was.
//
//   apply_activation_checkpointing(*model.layers);                // every block, full
//   apply_activation_checkpointing(*model.layers, {.every = 2});  // blocks 1, 3, 5, ...
//   apply_activation_checkpointing(*model.layers,                 // every block, selective
//                                  {.policy = autograd::CheckpointPolicy::kSaveProducts});
//
// These are TorchTitan's modes: "full", "selective" with selective_ac_option
// = "op", and "selective" with selective_ac_option = "k" (every k-th block,
// the others not checkpointed). What each keeps per block: block_memory.h.
#pragma once

#include "autograd/checkpoint.h"
#include "autograd/nn/module.h"

namespace spmd::nn {

class CheckpointWrapper : public Module {
 public:
  explicit CheckpointWrapper(
      std::shared_ptr<Module> inner,
      autograd::CheckpointPolicy policy = autograd::CheckpointPolicy::kRecomputeAll);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override {
    return "CheckpointWrapper(" + inner_->type_name() + ")";
  }
  Module& inner() { return *inner_; }
  autograd::CheckpointPolicy policy() const { return policy_; }

 private:
  std::shared_ptr<Module> inner_;
  autograd::CheckpointPolicy policy_;
};

struct CheckpointOptions {
  autograd::CheckpointPolicy policy = autograd::CheckpointPolicy::kRecomputeAll;
  // Wraps layers every-1, 2 every-1, ... (TorchTitan counts blocks from 1
  // and wraps those whose count divides by k); 1: every layer.
  int64_t every = 1;
};

// Wraps the elements of `layers` that `options` names and that are not wrapped yet.
// REQUIRES: options.every >= 1.
void apply_activation_checkpointing(ModuleList& layers, const CheckpointOptions& options = {});

}  // namespace spmd::nn
