// The backward engine: count dependencies, then run ready nodes in order.
// A pass may follow only some of each node's edges (EdgeMasks): the
// input half of a split backward follows the edges that lead to the chosen
// inputs and keeps, for the weight half, every node it ran with an edge it
// did not follow, with the gradients it ran on.
#include "autograd/engine.h"

#include <queue>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "runtime/profiler.h"
#include "tensor/ops.h"

namespace spmd::autograd {
namespace {

// The callbacks of the outermost backward running on this thread (null when
// none runs).
thread_local std::vector<std::function<void()>>* final_callbacks = nullptr;

// The edges of the node now running whose gradients the pass wants (null:
// all of them), for needs_input_grad().
thread_local const std::vector<bool>* running_mask = nullptr;

// Which of a node's next edges a pass follows, one flag per edge; a node
// without an entry follows all of its edges.
using EdgeMasks = std::unordered_map<const Node*, std::vector<bool>>;

// The node every backward starts from: its edges lead to the roots, and it
// hands each root its seed gradient.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, TensorList seeds)
      : Node(std::move(edges)), seeds_(std::move(seeds)) {}
  std::string name() const override { return "GraphRoot"; }
  TensorList apply(TensorList&&) override { return seeds_; }  // a copy: a weight pass reruns it
  void release_saved() override { seeds_.clear(); }

 private:
  TensorList seeds_;
};

// What the engine knows of one node during a backward: how many gradients
// are still to arrive, and the sum of those that have (one slot per output).
struct Task {
  std::shared_ptr<Node> node;
  int pending = 0;
  TensorList grads;
  std::vector<bool> owned;  // grads[i] is a sum this engine allocated (safe to add into)
  TensorList outputs;       // the weight pass: what the input pass computed, handed on unrun
};

class GraphTask {
 public:
  // A pass from `root` along the edges `masks` allows (every edge when
  // null). With `deferred`, each node run with an edge it did not follow is
  // kept there, its saved tensors alive, instead of being freed.
  GraphTask(std::shared_ptr<Node> root, bool retain_graph, EdgeMasks masks = {},
            std::vector<DeferredNode>* deferred = nullptr)
      : retain_graph_(retain_graph), masks_(std::move(masks)), deferred_(deferred) {
    count_dependencies(root);
    push_ready(root.get());
  }
  // The weight pass: the deferred nodes, each ready with its gradients,
  // along the edges the input pass left (their pre-hooks ran then).
  explicit GraphTask(std::vector<DeferredNode>&& nodes) : retain_graph_(false) {
    for (DeferredNode& d : nodes) masks_[d.node.get()] = std::move(d.mask);
    for (DeferredNode& d : nodes) count_dependencies(d.node);
    for (DeferredNode& d : nodes) {
      Task& task = tasks_.at(d.node.get());
      task.grads = std::move(d.grads);
      task.owned.assign(task.grads.size(), false);
      task.outputs = std::move(d.outputs);
      hooks_ran_.insert(d.node.get());
      push_ready(d.node.get());
    }
  }

  void run() {
    while (!ready_.empty()) {
      Node* node = std::get<2>(ready_.top());
      ready_.pop();
      run_node(tasks_.at(node));
    }
  }

 private:
  // Walks every node reachable from the root, counting the edges into each.
  void count_dependencies(const std::shared_ptr<Node>& root) {
    tasks_[root.get()].node = root;
    std::vector<Node*> stack{root.get()};
    while (!stack.empty()) {
      Node* node = stack.back();
      stack.pop_back();
      const std::vector<bool>* mask = mask_of(node);
      for (size_t i = 0; i < node->next_edges().size(); ++i) {
        const Edge& edge = node->next_edges()[i];
        if (!edge.valid() || (mask != nullptr && !(*mask)[i])) continue;
        auto [it, inserted] = tasks_.try_emplace(edge.fn.get());
        it->second.pending += 1;
        if (inserted) {
          it->second.node = edge.fn;
          stack.push_back(edge.fn.get());
        }
      }
    }
  }

  void run_node(Task& task) {
    Node& node = *task.node;
    // The node's own time (its bookkeeping and the ops it runs beneath it).
    const std::string scope_name = profiler::enabled() ? "autograd::" + node.name() : "";
    ProfileScope scope(scope_name);
    TensorList grads = std::move(task.grads);
    grads.resize(node.num_outputs());
    const std::vector<bool>* mask = mask_of(&node);
    const bool defer = deferred_ != nullptr && leaves_an_edge(node, mask);
    TensorList kept;  // the gradients it ran on, for the weight pass
    // A weight pass hands on what the input pass computed for it, or runs the node.
    TensorList outputs = !task.outputs.empty()
                             ? std::move(task.outputs)
                             : call(node, std::move(grads), mask, defer ? &kept : nullptr);
    if (defer && !kept.empty()) {
      std::vector<bool> rest(node.next_edges().size());
      bool computed = outputs.size() == rest.size();  // every edge left has its gradient
      for (size_t i = 0; i < rest.size(); ++i) {
        rest[i] = node.next_edges()[i].valid() && !(*mask)[i];
        computed = computed && (!rest[i] || outputs[i].defined());
      }
      TensorList left;
      if (computed) {  // the node need not run again: keep its weights' share, free the rest
        left.resize(rest.size());
        for (size_t i = 0; i < rest.size(); ++i)
          if (rest[i]) left[i] = std::move(outputs[i]);
        kept.clear();
        if (!retain_graph_) node.release_saved();
      }
      deferred_->push_back({task.node, std::move(kept), std::move(rest), std::move(left)});
    } else if (!retain_graph_) {
      node.release_saved();
    }
    SPMD_CHECK(outputs.empty() || outputs.size() == node.next_edges().size(), "backward of ",
               node.name(), ": returned ", outputs.size(), " gradients for ",
               node.next_edges().size(), " inputs");
    for (size_t i = 0; i < node.next_edges().size(); ++i) {
      const Edge& edge = node.next_edges()[i];
      if (!edge.valid() || (mask != nullptr && !(*mask)[i])) continue;
      Task& next = tasks_.at(edge.fn.get());
      if (i < outputs.size() && outputs[i].defined()) {
        accumulate(next, edge.input_nr, check_gradient(node, i, edge, std::move(outputs[i])));
      }
      if (--next.pending == 0) push_ready(edge.fn.get());
    }
    task.node.reset();
  }

  // Runs the node's pre-hooks and apply(); a node none of whose outputs got a
  // gradient is skipped (its inputs get none either).
  // With `keep`, the gradients apply() gets are also copied there (handles),
  // and a node with no outputs (the root) keeps one undefined slot so that
  // it counts as run.
  TensorList call(Node& node, TensorList&& grads, const std::vector<bool>* mask, TensorList* keep) {
    bool any = node.num_outputs() == 0;
    for (const Tensor& g : grads) any = any || g.defined();
    if (!any) return {};
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) continue;
      const TensorMeta& m = node.output_meta(uint32_t(i));
      grads[i] = ops::zeros(m.shape, {m.dtype, m.device});
    }
    if (hooks_ran_.count(&node) == 0) {
      for (const auto& [output_nr, hook] : node.pre_hooks()) {
        Tensor replaced = hook(grads[output_nr]);
        if (replaced.defined()) grads[output_nr] = std::move(replaced);
      }
    }
    if (keep != nullptr) *keep = grads.empty() ? TensorList(1) : grads;
    struct MaskScope {
      const std::vector<bool>* saved = running_mask;
      ~MaskScope() { running_mask = saved; }
    } scope;
    running_mask = mask;
    try {
      return node.apply(std::move(grads));
    } catch (const InvalidArgument& e) {
      SPMD_THROW(InvalidArgument, "in the backward of ", node.name(), ": ", e.what());
    }
  }

  const std::vector<bool>* mask_of(const Node* node) const {
    const auto it = masks_.find(node);
    return it == masks_.end() ? nullptr : &it->second;
  }

  // True when the pass leaves one of the node's edges for later.
  static bool leaves_an_edge(const Node& node, const std::vector<bool>* mask) {
    if (mask == nullptr) return false;
    for (size_t i = 0; i < mask->size(); ++i)
      if (node.next_edges()[i].valid() && !(*mask)[i]) return true;
    return false;
  }

  // The gradient for input i of `node`, checked against the tensor it is for.
  Tensor check_gradient(const Node& node, size_t i, const Edge& edge, Tensor g) {
    const TensorMeta& want = edge.fn->output_meta(edge.input_nr);
    SPMD_CHECK(g.shape() == want.shape, "backward of ", node.name(), ": the gradient of input ", i,
               " has shape ", g.shape(), ", but the input has shape ", want.shape);
    SPMD_CHECK(g.device() == want.device, "backward of ", node.name(), ": the gradient of input ",
               i, " is on ", g.device(), ", but the input is on ", want.device);
    if (g.dtype() != want.dtype) g = ops::to(g, want.dtype);
    return g;
  }

  // Sums g into slot `input_nr` of the task's gradients.
  static void accumulate(Task& task, uint32_t input_nr, Tensor g) {
    if (task.grads.empty()) {
      task.grads.resize(task.node->num_outputs());
      task.owned.resize(task.node->num_outputs());
    }
    Tensor& slot = task.grads[input_nr];
    if (!slot.defined()) {
      slot = std::move(g);
    } else if (task.owned[input_nr]) {
      ops::add_(slot, g);
    } else {
      slot = ops::add(slot, g);  // the first gradient may be shared: never write into it
      task.owned[input_nr] = true;
    }
  }

  // Highest sequence number first; among equals (AccumulateGrads), first ready
  // first, so the order is the same on every rank of a data-parallel job.
  void push_ready(Node* node) { ready_.push({node->sequence_nr(), -ready_count_++, node}); }

  bool retain_graph_;
  EdgeMasks masks_;
  std::vector<DeferredNode>* deferred_ = nullptr;
  std::unordered_set<const Node*> hooks_ran_;  // the weight pass's deferred nodes
  std::unordered_map<Node*, Task> tasks_;
  std::priority_queue<std::tuple<uint64_t, int64_t, Node*>> ready_;
  int64_t ready_count_ = 0;
};

// The seed gradient of one root: `grad`, or 1 for a one-element root.
Tensor seed_for(const Tensor& root, const Tensor& grad, size_t i) {
  SPMD_CHECK(root.requires_grad(), "backward: root ", i, " (shape ", root.shape(),
             ") does not require grad and has no grad_fn: nothing to differentiate");
  if (!grad.defined()) {
    SPMD_CHECK(root.numel() == 1,
               "backward: a gradient can be implied only for a one-element "
               "root, but root ",
               i, " has shape ", root.shape(), "; pass its gradient");
    return ops::ones_like(root);
  }
  SPMD_CHECK(grad.shape() == root.shape(), "backward: the gradient for root ", i, " has shape ",
             grad.shape(), ", the root has shape ", root.shape());
  return ops::to(grad, root.dtype());
}

}  // namespace

namespace {

// The node every pass of a backward from `roots` starts from.
std::shared_ptr<Node> make_root(const TensorList& roots, const TensorList& grads) {
  SPMD_CHECK(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(),
             " roots but ", grads.size(), " gradients");
  std::vector<Edge> edges;
  TensorList seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    seeds.push_back(seed_for(roots[i], grads.empty() ? Tensor() : grads[i], i));
    edges.push_back(gradient_edge(roots[i]));
  }
  return std::make_shared<GraphRoot>(std::move(edges), std::move(seeds));
}

// Runs the task with the callbacks of the outermost pass (see queue_callback).
void run_with_callbacks(GraphTask& task) {
  ProfilePhaseGuard phase(ProfilePhase::kBackward);
  if (final_callbacks != nullptr) {  // nested inside another backward: its callbacks
    task.run();
    return;
  }
  std::vector<std::function<void()>> callbacks;
  final_callbacks = &callbacks;
  struct Reset {
    ~Reset() { final_callbacks = nullptr; }
  } reset;
  task.run();
  for (size_t i = 0; i < callbacks.size(); ++i) {  // a callback may queue another
    std::function<void()> callback = std::move(callbacks[i]);
    callback();
  }
}

// For every node reachable from `root`: which of its edges lead to one of
// `targets` (the inputs' AccumulateGrad nodes). Found backwards: the nodes
// with a path to a target are the targets and, in turn, their parents.
EdgeMasks edges_to(const std::shared_ptr<Node>& root, const std::vector<const Node*>& targets) {
  std::unordered_map<const Node*, std::vector<const Node*>> parents{{root.get(), {}}};
  std::vector<const Node*> stack{root.get()};
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      auto [it, inserted] = parents.try_emplace(edge.fn.get());
      it->second.push_back(node);
      if (inserted) stack.push_back(edge.fn.get());
    }
  }
  std::unordered_set<const Node*> reaches;
  for (const Node* t : targets)
    if (parents.count(t) != 0 && reaches.insert(t).second) stack.push_back(t);
  while (!stack.empty()) {
    const Node* node = stack.back();
    stack.pop_back();
    for (const Node* parent : parents.at(node))
      if (reaches.insert(parent).second) stack.push_back(parent);
  }
  EdgeMasks masks;
  for (const auto& [node, unused] : parents) {
    std::vector<bool>& mask = masks[node];
    for (const Edge& edge : node->next_edges())
      mask.push_back(edge.valid() && reaches.count(edge.fn.get()) != 0);
  }
  return masks;
}

}  // namespace

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  NoGradGuard no_grad;
  GraphTask task(make_root(roots, grads), retain_graph);
  run_with_callbacks(task);
}

WeightBackward run_backward_input(const TensorList& roots, const TensorList& grads,
                                  const TensorList& inputs) {
  NoGradGuard no_grad;
  std::vector<const Node*> targets;
  for (size_t i = 0; i < inputs.size(); ++i) {
    SPMD_CHECK(inputs[i].is_leaf() && inputs[i].requires_grad(), "backward_input: input ", i,
               " (shape ", inputs[i].shape(), ") is not a leaf that requires grad");
    targets.push_back(grad_accumulator(inputs[i]).get());
  }
  std::shared_ptr<Node> root = make_root(roots, grads);
  EdgeMasks masks = edges_to(root, targets);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SPMD_CHECK(masks.count(targets[i]) != 0, "backward_input: input ", i, " (shape ",
               inputs[i].shape(), ") is not used in the graph of the roots");
  }
  WeightBackward weights;
  GraphTask task(std::move(root), /*retain_graph=*/false, std::move(masks), &weights.deferred_);
  run_with_callbacks(task);
  return weights;
}

void WeightBackward::run() {
  SPMD_CHECK(!ran_, "backward_weight: this weight pass has already run");
  ran_ = true;
  if (deferred_.empty()) return;
  NoGradGuard no_grad;
  GraphTask task(std::move(deferred_));
  deferred_.clear();
  run_with_callbacks(task);
}

bool needs_input_grad(size_t i) {
  return running_mask == nullptr || i >= running_mask->size() || (*running_mask)[i];
}

bool backward_running() { return final_callbacks != nullptr; }

void queue_callback(std::function<void()> callback) {
  SPMD_CHECK(final_callbacks != nullptr,
             "queue_callback: no backward is running on this thread; call it from a hook "
             "during backward()");
  final_callbacks->push_back(std::move(callback));
}

}  // namespace spmd::autograd
