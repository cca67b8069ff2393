// backward(), detach() and the tensor hooks, on top of the engine and the graph.
#include "autograd/variable.h"

#include "autograd/engine.h"

namespace spmd {

void backward(const Tensor& root, const Tensor& grad, bool retain_graph) {
  autograd::run_backward({root}, {grad}, retain_graph);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph) {
  autograd::run_backward(roots, grads, retain_graph);
}

autograd::WeightBackward backward_input(const Tensor& root, const Tensor& grad,
                                        const std::vector<Tensor>& inputs) {
  return autograd::run_backward_input({root}, {grad}, inputs);
}

void backward_weight(autograd::WeightBackward& weights) { weights.run(); }

Tensor detach(const Tensor& t) {
  return Tensor(t.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
}

std::string grad_fn_name(const Tensor& t) {
  if (!t.defined() || !t.autograd_meta() || !t.autograd_meta()->grad_fn) return "";
  return t.autograd_meta()->grad_fn->name();
}

void register_hook(const Tensor& t, autograd::GradHook hook) {
  SPMD_CHECK(t.requires_grad(), "register_hook: the tensor (shape ", t.shape(),
             ") does not require grad, so no gradient will reach it");
  AutogradMeta& meta = *t.autograd_meta();
  if (meta.grad_fn) {
    meta.grad_fn->add_pre_hook(meta.output_nr, std::move(hook));
  } else {
    meta.grad_hooks.push_back(std::move(hook));
  }
}

void register_post_accumulate_grad_hook(const Tensor& leaf,
                                        std::function<void(const Tensor& leaf)> hook) {
  SPMD_CHECK(leaf.is_leaf() && leaf.requires_grad(),
             "register_post_accumulate_grad_hook: only a leaf that requires grad (a parameter) "
             "accumulates a gradient; this tensor of shape ",
             leaf.shape(), (leaf.is_leaf() ? " does not require grad" : " is not a leaf"));
  leaf.autograd_meta()->post_accumulate_grad_hooks.push_back(std::move(hook));
}

}  // namespace spmd
