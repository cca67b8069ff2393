// Nodes, saved tensors, gradient accumulation, and the helpers that record an op.
#include "autograd/node.h"

#include <limits>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace spmd::autograd {
namespace {

thread_local uint64_t next_sequence_nr = 0;

// A handle to t's data, shape and strides without its autograd fields.
Tensor data_alias(const Tensor& t) {
  return Tensor(t.storage(), t.shape(), t.strides(), t.offset(), t.dtype());
}

// True when g can become a leaf's .grad as it is: nothing else holds it or
// any view of its storage, it is contiguous, and it covers its whole storage.
bool adoptable(const Tensor& g, const Tensor& leaf) {
  return g.use_count() == 1 && g.storage().use_count() == 1 && g.is_contiguous() &&
         g.offset() == 0 && g.nbytes() == g.storage()->nbytes() && g.dtype() == leaf.dtype() &&
         g.device() == leaf.device();
}

}  // namespace

Node::Node(std::vector<Edge> next_edges)
    : next_edges_(std::move(next_edges)), sequence_nr_(next_sequence_nr++) {}

Node::~Node() {
  // Take over each child this node alone keeps alive, and its children in
  // turn, so that each is destroyed here with no children left to recurse into.
  std::vector<std::shared_ptr<Node>> stack;
  auto adopt_children = [&stack](Node& n) {
    for (Edge& e : n.next_edges_)
      if (e.fn && e.fn.use_count() == 1) stack.push_back(std::move(e.fn));
  };
  adopt_children(*this);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    adopt_children(*n);
  }
}

uint32_t Node::add_output(const Tensor& output) {
  outputs_.push_back({output.shape(), output.dtype(), output.device()});
  return uint32_t(outputs_.size() - 1);
}

void Node::add_pre_hook(uint32_t output_nr, GradHook hook) {
  SPMD_CHECK(output_nr < outputs_.size(), "add_pre_hook: ", name(), " has ", outputs_.size(),
             " outputs, not ", output_nr + 1);
  pre_hooks_.emplace_back(output_nr, std::move(hook));
}

// --- SavedTensor ---------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  data_ = data_alias(t);
  version_ = t.storage()->version();
}

const Tensor& SavedTensor::get() const {
  if (data_.defined()) {
    const uint64_t now = data_.storage()->version();
    SPMD_CHECK(now == version_, "a tensor of shape ", data_.shape(),
               " saved for backward was modified in place after it was saved (its storage is at "
               "version ",
               now, ", it was saved at version ", version_,
               "); compute on a clone() instead of overwriting it");
  }
  return data_;
}

// --- AccumulateGrad ------------------------------------------------------------

AccumulateGrad::AccumulateGrad(Tensor leaf) : Node({}), leaf_(std::move(leaf)) {
  add_output(leaf_);
  set_sequence_nr(std::numeric_limits<uint64_t>::max());
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor g = std::move(grads.at(0));
  AutogradMeta& meta = leaf_.ensure_autograd_meta();
  for (const GradHook& hook : meta.grad_hooks) {
    Tensor replaced = hook(g);
    if (replaced.defined()) g = std::move(replaced);
  }
  if (!meta.grad.defined()) {
    meta.grad = adoptable(g, leaf_) ? std::move(g) : ops::to(ops::clone(g), leaf_.dtype());
  } else {
    ops::add_(meta.grad, g);
  }
  for (const auto& hook : meta.post_accumulate_grad_hooks) hook(leaf_);
  return {};
}

Tensor accumulable_grad(const Tensor& leaf, const Shape& shape) {
  const AutogradMeta* meta = leaf.defined() ? leaf.autograd_meta() : nullptr;
  if (meta == nullptr || !meta->requires_grad || meta->grad_fn != nullptr) return Tensor();
  const Tensor& g = meta->grad;
  if (!g.defined() || g.shape() != shape || g.dtype() != leaf.dtype() ||
      g.device() != leaf.device() || !g.is_contiguous())
    return Tensor();
  if (!meta->grad_hooks.empty() || !meta->post_accumulate_grad_hooks.empty()) return Tensor();
  const std::shared_ptr<Node> acc = meta->grad_accumulator.lock();
  if (acc != nullptr && !acc->pre_hooks().empty()) return Tensor();
  return g;
}

// --- LambdaNode ----------------------------------------------------------------

LambdaNode::LambdaNode(std::string name, std::vector<Edge> next_edges, Backward backward)
    : Node(std::move(next_edges)), name_(std::move(name)), backward_(std::move(backward)) {}

TensorList LambdaNode::apply(TensorList&& grads) {
  SPMD_CHECK(backward_ != nullptr,
             "trying to run backward through the graph a second time, "
             "after its saved tensors were freed; pass retain_graph = true to the first "
             "backward() if you need to run it twice");
  return backward_(grads.at(0));
}

// --- Recording -----------------------------------------------------------------

std::shared_ptr<Node> grad_accumulator(const Tensor& t) {
  SPMD_CHECK(t.is_leaf() && t.requires_grad(),
             "grad_accumulator: only a leaf that requires grad has one");
  AutogradMeta& meta = *t.autograd_meta();
  std::shared_ptr<Node> acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return acc;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.autograd_meta()) return {};
  const AutogradMeta& meta = *t.autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  if (meta.requires_grad) return {grad_accumulator(t), 0};
  return {};
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t->defined() && t->requires_grad()) return true;
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!grad_mode_enabled()) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void set_history(Tensor& output, const std::shared_ptr<Node>& node) {
  AutogradMeta& meta = output.ensure_autograd_meta();
  meta.output_nr = node->add_output(output);
  meta.grad_fn = node;
  meta.requires_grad = true;
}

Tensor record(const char* name, std::initializer_list<const Tensor*> inputs, Tensor output,
              LambdaNode::Backward backward) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* in : inputs) {
    if (in->defined() && in->is_same(output)) return output;
    edges.push_back(gradient_edge(*in));
  }
  set_history(output, std::make_shared<LambdaNode>(name, std::move(edges), std::move(backward)));
  return output;
}

Tensor record(const char* name, const TensorList& inputs, Tensor output,
              LambdaNode::Backward backward) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& in : inputs) {
    if (in.defined() && in.is_same(output)) return output;
    edges.push_back(gradient_edge(in));
  }
  set_history(output, std::make_shared<LambdaNode>(name, std::move(edges), std::move(backward)));
  return output;
}

}  // namespace spmd::autograd
