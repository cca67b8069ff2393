// nn::Module: the unit a model is built of, as torch.nn.Module.
//
// A module owns named parameters (tensors that require grad and that an
// optimizer updates), named buffers (tensors that are state but not trained,
// such as RoPE tables) and named child modules. Names compose with dots, so
// every tensor of a model has a path:
//
//   layers.3.attn.wqkv.weight     (child "layers", its child "3", ...)
//
// Parallel strategies find what they act on by these names (a pipeline cut
// at "layers.4", a tensor-parallel plan for "layers.*.attn.wqkv", an FSDP
// unit per "layers.N"), and state_dict() saves under them, in PyTorch's
// naming, to safetensors files. A child registered under the empty name is
// transparent: its tensors appear under its parent's prefix (how a
// checkpointing wrapper stays invisible in the names).
//
// A module registers its tensors by reference: register_parameter("weight",
// weight_) remembers the member itself, so a strategy that swaps a
// parameter (for its shard, or a gathered copy) through parameter_slot()
// changes what forward() reads. Modules are therefore neither copied nor
// moved; they live in shared_ptrs.
//
// Modules here map one tensor to one tensor (forward(x)); operator() wraps
// forward with the forward pre- and post-hooks, which FSDP uses to gather
// parameters before a unit runs and free them after.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/safetensors.h"
#include "tensor/tensor.h"

namespace spmd::nn {

class Module : public std::enable_shared_from_this<Module> {
 public:
  // Called before forward with the input, which the hook may replace.
  using ForwardPreHook = std::function<void(Module& module, Tensor& input)>;
  // Called after forward with the input and the output, which the hook may replace.
  using ForwardHook = std::function<void(Module& module, const Tensor& input, Tensor& output)>;

  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The module's computation. Call it through operator(), which runs the hooks.
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(Tensor x);
  // The module's kind in messages: "Linear".
  virtual std::string type_name() const = 0;

  // --- Tree --------------------------------------------------------------------
  // Every parameter, buffer and module below this one, with its dotted name
  // (prefixed by `prefix`), in registration order, depth first. A tensor
  // registered twice (a tied weight) is listed once, under its first name.
  std::vector<std::pair<std::string, Tensor>> named_parameters(
      const std::string& prefix = "") const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(const std::string& prefix = "") const;
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const {
    return children_;
  }
  // The child at a dotted path ("layers.3.attn"); throws when there is none.
  Module& submodule(const std::string& path);
  // The member that holds the parameter at a dotted path ("layers.3.attn.wqkv.weight").
  Tensor& parameter_slot(const std::string& path);

  // --- State -----------------------------------------------------------------------
  // Parameters and persistent buffers by name (shared handles, not copies).
  TensorMap state_dict() const;
  // Copies each tensor of `state` into the parameter or buffer of that name.
  // strict: every name must match both ways; shapes must always match.
  void load_state_dict(const TensorMap& state, bool strict = true);
  void save(const std::string& path) const;  // state_dict() to a safetensors file
  void load(const std::string& path, bool strict = true);

  // --- Training ----------------------------------------------------------------------
  void train(bool on = true);  // this module and all below it
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Drops every parameter's gradient (set_to_none), or zeroes it in place.
  void zero_grad(bool set_to_none = true);
  int64_t num_parameters() const;
  // Moves (or converts, for floating tensors) every parameter and buffer, in place.
  void to(Device device);
  void to(DType dtype);
  // Moves every buffer only: for a model whose parameters were built on the
  // meta device and given bytes on `device` in place (tensor/deferred.h).
  void buffers_to(Device device);

  // --- Hooks ---------------------------------------------------------------------------
  // Returns a handle for remove_hook.
  int register_forward_pre_hook(ForwardPreHook hook);
  int register_forward_hook(ForwardHook hook);
  void remove_hook(int handle);
  // True when a forward pre- or post-hook is registered (a fused path that
  // computes this module's forward itself must then call it instead).
  bool has_hooks() const { return !pre_hooks_.empty() || !post_hooks_.empty(); }

 protected:
  // REQUIRES: `slot` is a member of this module (it is remembered by address).
  // An undefined slot is not registered (an absent bias).
  void register_parameter(const std::string& name, Tensor& slot, bool requires_grad = true);
  void register_buffer(const std::string& name, Tensor& slot, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }
  // Replaces the child registered under `name` (a list's element, a wrapper).
  void replace_child(const std::string& name, std::shared_ptr<Module> child);

 private:
  struct Buffer {
    std::string name;
    Tensor* slot;
    bool persistent;
  };
  void add_child(const std::string& name, std::shared_ptr<Module> child);
  template <class F>
  void visit(const std::string& prefix, F&& f);

  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<int, ForwardPreHook>> pre_hooks_;
  std::vector<std::pair<int, ForwardHook>> post_hooks_;
  int next_hook_ = 0;
  bool training_ = true;
};

// "a.b" from prefix "a" and name "b"; an empty part adds nothing.
std::string join_name(const std::string& prefix, const std::string& name);

// An ordered list of modules named "0", "1", ... (torch.nn.ModuleList); its
// forward runs them in order.
class ModuleList : public Module {
 public:
  void push_back(std::shared_ptr<Module> m);
  Module& operator[](size_t i) { return *items_.at(i); }
  std::shared_ptr<Module> at(size_t i) const { return items_.at(i); }
  // Replaces element i (wrapping a layer in activation checkpointing, say).
  void set(size_t i, std::shared_ptr<Module> m);
  size_t size() const { return items_.size(); }
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ModuleList"; }

 private:
  std::vector<std::shared_ptr<Module>> items_;
};

}  // namespace spmd::nn
