// The graph that a forward pass records, and from which backward() computes
// gradients.
//
// Every differentiable op whose inputs require gradients (while grad mode is
// on) creates a Node: the op's backward, with an Edge to the node of each
// input. An input made by another op points at that op's node; a leaf that
// requires grad (a parameter) points at its AccumulateGrad node, which adds the
// gradient into the leaf's .grad(). The outputs remember their node (grad_fn)
// and which of its outputs they are (output_nr), so the next op can link to it.
//
//     x(leaf) --> [AccumulateGrad x]
//       |             ^
//       v             | Edge
//     y = exp(x)  --> [exp backward] <-- Edge -- [sum backward] <-- loss
//
// The graph holds what backward needs in SavedTensors: handles to the forward's
// tensors (without their autograd fields, so no cycle forms) and the version
// of their storage when saved. If an in-place op later overwrote one, reading
// it throws instead of computing a wrong gradient.
//
// Not here: the order in which nodes run (engine.h), the user-facing calls
// (variable.h), custom ops with their own backward (function.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/autograd_meta.h"
#include "tensor/tensor.h"

namespace spmd::autograd {

class Node;
using TensorList = std::vector<Tensor>;
// A hook on the gradient flowing into a tensor: may return a replacement, or
// an undefined tensor to keep the gradient as it is.
using GradHook = std::function<Tensor(const Tensor& grad)>;

// Gradient flows along an edge into input `input_nr` of `fn` (which is the
// output number input_nr of fn's forward op). An edge with no fn leads nowhere
// (an input that does not require grad).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// What a gradient must look like: the forward tensor's shape, dtype, device.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::kF32;
  Device device;
};

// One recorded operation. Its forward had some outputs (each of which gets a
// gradient in backward) and some inputs (each an edge to where its gradient
// goes).
class Node {
 public:
  explicit Node(std::vector<Edge> next_edges);
  // Frees the graph behind this node iteratively (a long chain of nodes
  // would otherwise be destroyed by one nested destructor call per node).
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // The op's name, for error messages: "matmul", "AccumulateGrad".
  virtual std::string name() const = 0;
  // Gradients of the forward's outputs (one per output; the engine fills in
  // zeros for outputs no gradient reached) -> gradients of its inputs (one
  // per next edge; undefined for an input that needs none).
  virtual TensorList apply(TensorList&& grads) = 0;
  // Frees what was saved for backward; later calls to apply() throw. The
  // engine calls it after running the node unless retain_graph was asked for.
  virtual void release_saved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  // Creation order on this thread. The engine runs the ready node with the
  // highest number first: the later layers' backward runs first, as in PyTorch.
  uint64_t sequence_nr() const { return sequence_nr_; }

  // The forward's outputs, in order; add_output returns the output's number.
  uint32_t add_output(const Tensor& output);
  size_t num_outputs() const { return outputs_.size(); }
  const TensorMeta& output_meta(uint32_t output_nr) const { return outputs_.at(output_nr); }

  // Hooks on the gradient of one output (a non-leaf tensor's register_hook).
  void add_pre_hook(uint32_t output_nr, GradHook hook);
  const std::vector<std::pair<uint32_t, GradHook>>& pre_hooks() const { return pre_hooks_; }

 protected:
  // For nodes that must run as soon as they are ready (AccumulateGrad).
  void set_sequence_nr(uint64_t nr) { sequence_nr_ = nr; }

 private:
  std::vector<Edge> next_edges_;
  std::vector<TensorMeta> outputs_;
  std::vector<std::pair<uint32_t, GradHook>> pre_hooks_;
  uint64_t sequence_nr_;
};

// A tensor kept for backward, with its storage version at the time.
class SavedTensor {
 public:
  SavedTensor() = default;
  // Saves a handle to t's data (without its autograd fields); t may be undefined.
  explicit SavedTensor(const Tensor& t);
  // The saved tensor. Throws when it was modified in place after it was saved.
  const Tensor& get() const;
  bool defined() const { return data_.defined(); }

 private:
  Tensor data_;
  uint64_t version_ = 0;
};

// The sink of a leaf that requires grad: runs the leaf's gradient hooks,
// adds the gradient into leaf.grad() (adopting it without a copy when nothing
// else holds it), then runs the leaf's post-accumulate-grad hooks. Those run
// the moment the leaf's gradient for this backward is complete: the engine
// runs an AccumulateGrad as soon as every gradient into it has arrived, before
// any other ready node.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// The node of a built-in op: its backward is a closure over what it saved.
// The closure takes the gradient of the (single) output and returns one
// gradient per input.
class LambdaNode final : public Node {
 public:
  using Backward = std::function<TensorList(const Tensor& grad)>;
  LambdaNode(std::string name, std::vector<Edge> next_edges, Backward backward);
  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release_saved() override { backward_ = nullptr; }

 private:
  std::string name_;
  Backward backward_;
};

// --- Recording helpers (used by every differentiable op) ---------------------

// The edge a gradient for t follows: to t's grad_fn, to its AccumulateGrad
// when t is a leaf that requires grad, or nowhere.
Edge gradient_edge(const Tensor& t);
// t's AccumulateGrad, created on first use. REQUIRES: t is a leaf that requires grad.
std::shared_ptr<Node> grad_accumulator(const Tensor& t);
// Gradient-accumulation fusion: leaf.grad() when a backward may add a
// gradient of `shape` for the leaf straight into it (a GEMM with beta = 1)
// instead of returning it for the leaf's AccumulateGrad to add, because that
// would do nothing else: the leaf requires grad, its .grad exists with this
// shape, the leaf's dtype and device, contiguous, and no hook would see the
// gradient (none on the leaf, none on its AccumulateGrad, no post-accumulate-
// grad hook: DDP's and FSDP's keep their parameters on the plain path).
// Undefined otherwise. A node that adds into it returns no gradient for that
// input. Microbatches after the first (a pipeline's, gradient accumulation)
// are what it saves on: a weight-sized buffer, its zeroing, and the pass of
// the add.
Tensor accumulable_grad(const Tensor& leaf, const Shape& shape);
// True when grad mode is on and some input requires grad: the op must record.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
bool needs_grad(const TensorList& inputs);
// Makes `output` (and, through add_output, nothing else) the output of `node`.
void set_history(Tensor& output, const std::shared_ptr<Node>& node);
// Records a single-output op: a LambdaNode with an edge to each input, the
// output's grad_fn set to it. When the output is the very tensor of an input
// (an identity: contiguous() of a contiguous tensor), returns it unchanged.
Tensor record(const char* name, std::initializer_list<const Tensor*> inputs, Tensor output,
              LambdaNode::Backward backward);
Tensor record(const char* name, const TensorList& inputs, Tensor output,
              LambdaNode::Backward backward);

}  // namespace spmd::autograd
