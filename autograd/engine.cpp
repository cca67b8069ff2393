// The backward engine: count dependencies, then run ready nodes in order.
#include "autograd/engine.h"

#include <queue>
#include <tuple>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace spmd::autograd {
namespace {

// The callbacks of the outermost backward running on this thread (null when
// none runs).
thread_local std::vector<std::function<void()>>* final_callbacks = nullptr;

// The node every backward starts from: its edges lead to the roots, and it
// hands each root its seed gradient.
class GraphRoot final : public Node {
 public:
  GraphRoot(std::vector<Edge> edges, TensorList seeds)
      : Node(std::move(edges)), seeds_(std::move(seeds)) {}
  std::string name() const override { return "GraphRoot"; }
  TensorList apply(TensorList&&) override { return std::move(seeds_); }

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
};

class GraphTask {
 public:
  GraphTask(std::shared_ptr<Node> root, bool retain_graph) : retain_graph_(retain_graph) {
    count_dependencies(root);
    push_ready(root.get());
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
      for (const Edge& edge : node->next_edges()) {
        if (!edge.valid()) continue;
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
    TensorList grads = std::move(task.grads);
    grads.resize(node.num_outputs());
    TensorList outputs = call(node, std::move(grads));
    if (!retain_graph_) node.release_saved();
    SPMD_CHECK(outputs.empty() || outputs.size() == node.next_edges().size(), "backward of ",
               node.name(), ": returned ", outputs.size(), " gradients for ",
               node.next_edges().size(), " inputs");
    for (size_t i = 0; i < node.next_edges().size(); ++i) {
      const Edge& edge = node.next_edges()[i];
      if (!edge.valid()) continue;
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
  TensorList call(Node& node, TensorList&& grads) {
    bool any = node.num_outputs() == 0;
    for (const Tensor& g : grads) any = any || g.defined();
    if (!any) return {};
    for (size_t i = 0; i < grads.size(); ++i) {
      if (grads[i].defined()) continue;
      const TensorMeta& m = node.output_meta(uint32_t(i));
      grads[i] = ops::zeros(m.shape, {m.dtype, m.device});
    }
    for (const auto& [output_nr, hook] : node.pre_hooks()) {
      Tensor replaced = hook(grads[output_nr]);
      if (replaced.defined()) grads[output_nr] = std::move(replaced);
    }
    try {
      return node.apply(std::move(grads));
    } catch (const InvalidArgument& e) {
      SPMD_THROW(InvalidArgument, "in the backward of ", node.name(), ": ", e.what());
    }
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

void run_backward(const TensorList& roots, const TensorList& grads, bool retain_graph) {
  SPMD_CHECK(grads.empty() || grads.size() == roots.size(), "backward: ", roots.size(),
             " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;
  std::vector<Edge> edges;
  TensorList seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    seeds.push_back(seed_for(roots[i], grads.empty() ? Tensor() : grads[i], i));
    edges.push_back(gradient_edge(roots[i]));
  }
  GraphTask task(std::make_shared<GraphRoot>(std::move(edges), std::move(seeds)), retain_graph);
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

bool backward_running() { return final_callbacks != nullptr; }

void queue_callback(std::function<void()> callback) {
  SPMD_CHECK(final_callbacks != nullptr,
             "queue_callback: no backward is running on this thread; call it from a hook "
             "during backward()");
  final_callbacks->push_back(std::move(callback));
}

}  // namespace spmd::autograd
