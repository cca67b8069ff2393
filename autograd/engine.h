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
#pragma once

#include <functional>

#include "autograd/node.h"

namespace spmd::autograd {

// Runs backward from `roots`, seeding each with the matching gradient in
// `grads` (an undefined or missing one means 1, for one-element roots).
// REQUIRES: every root requires grad; each seed has its root's shape.
void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph);

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
