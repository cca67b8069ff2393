// The backward pass: gradients flow from the roots (a loss) back through the
// recorded graph (node.h) to the leaves.
//
// The engine first walks the graph from the roots and counts, for every node,
// how many edges lead into it. Then it runs nodes from a ready queue: a node is
// ready once every gradient into it has arrived (its count fell to zero), so
// gradients arriving along several edges (a tensor used twice) are summed
// before the node runs. Among ready nodes the one created last runs first
// (the highest sequence number), and AccumulateGrad nodes before all others,
// so a parameter's post-accumulate-grad hooks fire as soon as its gradient is
// final. Both walks use explicit stacks and queues, never recursion: a graph
// 10,000 ops deep does not touch the call stack.
//
// While it runs, grad mode is off: backward formulas are raw ops and record
// nothing (no gradients of gradients). Without retain_graph, each node frees
// what it saved as soon as it has run, so activations go away during backward.
//
// A backward can also run in two passes, as zero-bubble pipelines need
// (parallel/pipeline/): run_backward_input() follows only the edges that
// lead to chosen inputs and gives those their gradients; every node it ran
// that also has an edge towards a weight (a linear's weight, a norm's gain)
// is kept, with the gradients it ran on and its saved tensors, and nothing
// else. WeightBackward::run() later runs those nodes again along the edges
// left (the weights' side) and accumulates into the parameters. A node is
// told which input gradients its pass wants (needs_input_grad), so a linear
// computes dx in the first pass and dW in the second, each once. A node
// whose one kernel gives every gradient (a fused norm's dx and gain, the
// fused bias + GELU's du and bias) computes its weights' share in the first
// pass anyway: the engine keeps that share for the weight pass, which then
// only hands it on, and frees the node's saved tensors at once, so such a
// node runs once. What this costs: between the passes the kept nodes hold
// their saved tensors (a linear's input) or their weights' gradients (a
// norm's gain, a bias: one row each).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "autograd/node.h"

namespace spmd::autograd {

// Runs backward from `roots`, seeding each with the matching gradient in
// `grads` (an undefined or missing one means 1, for one-element roots).
// REQUIRES: every root requires grad; each seed has its root's shape.
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

// A node kept by an input pass for the weight pass: the gradients it ran
// on, and the edges still to follow; or, when the input pass computed the
// gradients of those edges too, these (`outputs`, one per edge) instead of
// the gradients, and the node's saved tensors already freed. Internal to
// the engine.
struct DeferredNode {
  std::shared_ptr<Node> node;
  TensorList grads;
  std::vector<bool> mask;
  TensorList outputs;
};

// The second half of a split backward (run_backward_input).
class WeightBackward {
 public:
  WeightBackward() = default;
  WeightBackward(WeightBackward&&) = default;
  WeightBackward& operator=(WeightBackward&&) = default;
  // Accumulates the gradients of every leaf the input pass did not reach
  // (the weights) into their .grad(), with their hooks, then frees what the
  // input pass kept. Throws InvalidArgument when called a second time.
  void run();
  // How many nodes the input pass kept for this one.
  size_t num_deferred() const { return deferred_.size(); }

 private:
  friend WeightBackward run_backward_input(const TensorList&, const TensorList&, const TensorList&);
  std::vector<DeferredNode> deferred_;
  bool ran_ = false;
};

// The first half of a split backward: gradients from `roots` (seeded as in
// run_backward) to `inputs` alone, accumulated into their .grad(). Every
// node on the way is freed, but those the weight pass needs.
// REQUIRES: each input is a leaf that requires grad, used in the roots'
// graph (InvalidArgument naming it otherwise). `inputs` may be empty: then
// this pass runs nothing and the returned pass runs the whole backward.
WeightBackward run_backward_input(const TensorList& roots, const TensorList& grads,
                                  const TensorList& inputs);

// Inside a node's backward: false when the pass running it does not want
// the gradient of the node's input i (a split backward's other half will
// compute it), so the node may skip computing it.
bool needs_input_grad(size_t i);

// Runs `callback` on this thread once the backward pass now running has run
// all of its nodes, just before backward() returns; callbacks run in the
// order they were queued (one may queue another). With nested passes
// (activation checkpointing backpropagates through its recomputation inside
// the outer backward) a callback belongs to the outermost pass, the one the
// caller of backward() waits for. A pass that throws drops its callbacks.
// This is where DDP waits for its last gradient buckets, as PyTorch's reducer
// does through Variable._execution_engine.queue_callback.
// REQUIRES: called during backward (from a hook), on the backward's thread.
void queue_callback(std::function<void()> callback);

// True while a backward pass runs on this thread: a module's forward called
// now is a recomputation (activation checkpointing), not a new step.
bool backward_running();

}  // namespace spmd::autograd
