// Custom differentiable ops: a forward and a backward written by hand, as
// torch.autograd.Function. The differentiable collectives of parallel/ are
// such Functions: all_reduce's backward is an all_reduce, send's is a recv.
//
//   struct Scale : autograd::Function<Scale> {
//     static constexpr const char* kName = "scale";
//     static Tensor forward(autograd::FunctionCtx& ctx, const Tensor& x, double s) {
//       ctx.set("s", s);
//       return ops::mul(x, s);
//     }
//     static autograd::TensorList backward(autograd::FunctionCtx& ctx,
//                                          const autograd::TensorList& grads) {
//       return {ops::mul(grads[0], ctx.get<double>("s"))};
//     }
//   };
//   Tensor y = Scale::apply(x, 3.0);
//
// forward receives apply's arguments as they were given (tensors and any
// other values) and runs with grad mode off, so what it computes records
// nothing; it returns a Tensor or a TensorList. backward receives one
// gradient per output (zeros where none flowed) and returns one gradient per
// Tensor argument of forward, in order (undefined for those that need none;
// ctx.needs_input_grad(i) says which do). A gradient of the wrong shape is
// an error naming the Function. Outputs are recorded only when grad mode is
// on and some Tensor argument requires grad.
#pragma once

#include <any>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "autograd/grad_mode.h"
#include "autograd/node.h"

namespace spmd::autograd {

// What forward leaves for backward.
class FunctionCtx {
 public:
  // Tensors backward will read; they are version-checked when read back.
  void save_for_backward(const TensorList& tensors);
  // The saved tensors. Throws when one was modified in place since.
  TensorList saved_tensors() const;
  // Any other value backward needs (a dim, a process group).
  template <class T>
  void set(const std::string& key, T value) {
    data_[key] = std::move(value);
  }
  template <class T>
  const T& get(const std::string& key) const;
  // True when the gradient of Tensor argument i is wanted: it required
  // grad at forward, and the pass now running asks for it (a split
  // backward asks for the inputs' and the weights' in different passes).
  bool needs_input_grad(size_t i) const;

  void set_needs_input_grad(std::vector<bool> needs) { needs_ = std::move(needs); }
  void release();

 private:
  std::vector<SavedTensor> saved_;
  std::unordered_map<std::string, std::any> data_;
  std::vector<bool> needs_;
  bool released_ = false;
};

// The node a Function records: it calls Derived::backward.
template <class Derived>
class FunctionNode final : public Node {
 public:
  explicit FunctionNode(std::vector<Edge> edges) : Node(std::move(edges)) {}
  std::string name() const override {
    if constexpr (requires { Derived::kName; }) return Derived::kName;
    return "Function";
  }
  TensorList apply(TensorList&& grads) override { return Derived::backward(ctx, grads); }
  void release_saved() override { ctx.release(); }

  FunctionCtx ctx;
};

template <class Derived>
struct Function {
  template <class... Args>
  static auto apply(Args&&... args);
};

// --- Implementation --------------------------------------------------------------

namespace detail {
template <class T>
constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<T>, Tensor>;

// The Tensor arguments among args, in order.
template <class... Args>
TensorList tensor_args(const Args&... args) {
  TensorList out;
  (
      [&] {
        if constexpr (is_tensor_v<Args>) out.push_back(args);
      }(),
      ...);
  return out;
}

// Makes `out` an output of node; an output that is one of the inputs
// becomes a new handle to the same data first (so the input keeps its history).
void attach_output(Tensor& out, const TensorList& inputs, const std::shared_ptr<Node>& node);
}  // namespace detail

template <class T>
const T& FunctionCtx::get(const std::string& key) const {
  auto it = data_.find(key);
  SPMD_CHECK(it != data_.end(), "FunctionCtx::get: nothing was stored under \"", key, "\"");
  const T* value = std::any_cast<T>(&it->second);
  SPMD_CHECK(value != nullptr, "FunctionCtx::get: \"", key, "\" holds another type");
  return *value;
}

template <class Derived>
template <class... Args>
auto Function<Derived>::apply(Args&&... args) {
  const TensorList inputs = detail::tensor_args(args...);
  const bool record = needs_grad(inputs);
  std::vector<Edge> edges;
  std::vector<bool> needs;
  if (record) {
    for (const Tensor& t : inputs) {
      edges.push_back(gradient_edge(t));
      needs.push_back(edges.back().valid());
    }
  }
  auto node = std::make_shared<FunctionNode<Derived>>(std::move(edges));
  node->ctx.set_needs_input_grad(std::move(needs));
  auto result = [&] {
    NoGradGuard no_grad;
    return Derived::forward(node->ctx, std::forward<Args>(args)...);
  }();
  if (!record) return result;
  if constexpr (std::is_same_v<decltype(result), Tensor>) {
    detail::attach_output(result, inputs, node);
  } else {
    for (Tensor& out : result) detail::attach_output(out, inputs, node);
  }
  return result;
}

}  // namespace spmd::autograd
