// The autograd calls a user makes on tensors: backward(), detach(), and the
// gradient hooks that data-parallel strategies hang their communication on.
//
//   Tensor loss = cross_entropy(model(x), y);
//   backward(loss);               // loss.backward()
//   Tensor g = w.grad();          // dloss/dw, accumulated
//
// Hook order during one backward (what DDP and FSDP may rely on):
//   1. a non-leaf tensor's hooks run when its gradient is complete, before its
//      grad_fn runs (they may replace the gradient);
//   2. a leaf's gradient hooks run when its gradient for this backward is
//      complete (summed over every use), before it is added into .grad();
//   3. right after, the leaf's post-accumulate-grad hooks run with the leaf,
//      whose .grad() now holds the accumulated gradient. The engine runs a
//      leaf's accumulation as soon as its gradient is final, before any other
//      ready node, so these fire layer by layer while backward continues: the
//      last layer's parameters first.
// Hooks run on the thread that called backward(), with grad mode off.
#pragma once

#include <functional>
#include <string>

#include "autograd/engine.h"
#include "autograd/node.h"

namespace spmd {

// Computes the gradient of `root` with respect to every leaf that requires
// grad and adds it into the leaf's .grad(). `grad` is d(something)/d(root);
// leave it undefined for a one-element root (a loss), where it is 1.
// Without retain_graph the graph's saved tensors are freed as it runs, and a
// second backward through it throws.
void backward(const Tensor& root, const Tensor& grad = {}, bool retain_graph = false);
// The same for several roots at once (their gradients meet where the graphs join).
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// backward() in two halves, for zero-bubble pipelines (engine.h): the
// gradient of root to `inputs` (leaves that require grad) now, into their
// .grad(); the weights' when the returned pass's run() is called, which
// backward_weight() does.
autograd::WeightBackward backward_input(const Tensor& root, const Tensor& grad,
                                        const std::vector<Tensor>& inputs);
void backward_weight(autograd::WeightBackward& weights);

// A tensor sharing t's data but outside any graph: it does not require grad,
// and nothing computed from it flows gradients back to t.
Tensor detach(const Tensor& t);

// The name of the op that produced t ("matmul"), or "" for a leaf.
std::string grad_fn_name(const Tensor& t);

// Calls `hook` with the gradient flowing into t each time backward reaches t;
// the hook may return a replacement gradient (or an undefined tensor to keep
// it). REQUIRES: t requires grad.
void register_hook(const Tensor& t, autograd::GradHook hook);
// Calls `hook(leaf)` after the leaf's gradient of each backward has been
// accumulated into leaf.grad(). REQUIRES: leaf is a leaf that requires grad.
void register_post_accumulate_grad_hook(const Tensor& leaf,
                                        std::function<void(const Tensor& leaf)> hook);

}  // namespace spmd
