// The autograd fields a tensor carries. tensor/ only stores them; autograd/
// gives them meaning (see autograd/engine.h). They live here, as in PyTorch's
// TensorImpl, so that one Tensor type serves raw and differentiable code.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tensor/tensor.h"

namespace spmd {

namespace autograd {
class Node;  // a recorded operation (autograd/node.h)
}

struct AutogradMeta {
  bool requires_grad = false;
  // The accumulated gradient of a leaf (or of a non-leaf that retains it).
  Tensor grad;
  // The operation that produced this tensor, and which of its outputs this
  // is; null for leaves.
  std::shared_ptr<autograd::Node> grad_fn;
  uint32_t output_nr = 0;
  bool retains_grad = false;
  // A leaf's gradient accumulator (autograd::AccumulateGrad), shared by every
  // graph that uses the leaf while one is alive; weak, because the graph owns it.
  std::weak_ptr<autograd::Node> grad_accumulator;
  // Called with the gradient flowing into this tensor; a hook may return a
  // replacement (or an undefined tensor to keep it).
  std::vector<std::function<Tensor(const Tensor&)>> grad_hooks;
  // Called on a leaf after its .grad has been accumulated (DDP and FSDP hang
  // their gradient communication here).
  std::vector<std::function<void(const Tensor&)>> post_accumulate_grad_hooks;
};

}  // namespace spmd
