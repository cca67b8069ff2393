// Module: registration, the named walk of the tree, state dicts, hooks.
#include "autograd/nn/module.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "autograd/grad_mode.h"
#include "tensor/ops.h"

namespace spmd::nn {

std::string join_name(const std::string& prefix, const std::string& name) {
  if (prefix.empty()) return name;
  if (name.empty()) return prefix;
  return prefix + "." + name;
}

Tensor Module::operator()(Tensor x) {
  for (auto& [id, hook] : pre_hooks_) hook(*this, x);
  Tensor y = forward(x);
  for (auto& [id, hook] : post_hooks_) hook(*this, x, y);
  return y;
}

// --- Registration -------------------------------------------------------------------

void Module::register_parameter(const std::string& name, Tensor& slot, bool requires_grad) {
  SPMD_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name(),
             ": parameter name \"", name, "\" must be non-empty and contain no dot");
  if (!slot.defined()) return;
  if (requires_grad && !slot.requires_grad()) slot.requires_grad_();
  params_.emplace_back(name, &slot);
}

void Module::register_buffer(const std::string& name, Tensor& slot, bool persistent) {
  SPMD_CHECK(name.find('.') == std::string::npos && !name.empty(), type_name(), ": buffer name \"",
             name, "\" must be non-empty and contain no dot");
  if (slot.defined()) buffers_.push_back({name, &slot, persistent});
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> child) {
  SPMD_CHECK(child != nullptr, type_name(), ": child \"", name, "\" is null");
  SPMD_CHECK(name.find('.') == std::string::npos, type_name(), ": child name \"", name,
             "\" contains a dot");
  children_.emplace_back(name, std::move(child));
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module> child) {
  for (auto& [n, c] : children_) {
    if (n == name) {
      c = std::move(child);
      return;
    }
  }
  SPMD_THROW(InvalidArgument, type_name(), ": no child named \"", name, "\" to replace");
}

// --- Walking the tree -------------------------------------------------------------------

// Calls f(prefix, module) on this module and every module below it, depth first.
template <class F>
void Module::visit(const std::string& prefix, F&& f) {
  std::vector<std::pair<std::string, Module*>> stack{{prefix, this}};
  while (!stack.empty()) {
    auto [name, m] = stack.back();
    stack.pop_back();
    f(name, *m);
    for (auto it = m->children_.rbegin(); it != m->children_.rend(); ++it)
      stack.emplace_back(join_name(name, it->first), it->second.get());
  }
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(
    const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  // A tied weight is one tensor under two names: keep the first.
  std::set<std::tuple<const void*, int64_t, int64_t>> seen;
  const_cast<Module*>(this)->visit(prefix, [&](const std::string& name, Module& m) {
    for (auto& [pname, slot] : m.params_) {
      if (seen.insert({slot->storage().get(), slot->offset(), slot->numel()}).second)
        out.emplace_back(join_name(name, pname), *slot);
    }
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(const std::string& prefix) const {
  std::vector<std::pair<std::string, Tensor>> out;
  const_cast<Module*>(this)->visit(prefix, [&](const std::string& name, Module& m) {
    for (const Buffer& b : m.buffers_) out.emplace_back(join_name(name, b.name), *b.slot);
  });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules(const std::string& prefix) {
  std::vector<std::pair<std::string, Module*>> out;
  visit(prefix, [&](const std::string& name, Module& m) { out.emplace_back(name, &m); });
  return out;
}

Module& Module::submodule(const std::string& path) {
  for (auto& [name, m] : named_modules())
    if (name == path) return *m;
  SPMD_THROW(InvalidArgument, type_name(), ": no submodule named \"", path, "\"");
}

Tensor& Module::parameter_slot(const std::string& path) {
  Tensor* found = nullptr;
  visit("", [&](const std::string& name, Module& m) {
    for (auto& [pname, slot] : m.params_)
      if (!found && join_name(name, pname) == path) found = slot;
  });
  SPMD_CHECK(found != nullptr, type_name(), ": no parameter named \"", path, "\"");
  return *found;
}

// --- State ---------------------------------------------------------------------------------

TensorMap Module::state_dict() const {
  TensorMap out;
  for (auto& [name, t] : named_parameters()) out[name] = t;
  const_cast<Module*>(this)->visit("", [&](const std::string& name, Module& m) {
    for (const Buffer& b : m.buffers_)
      if (b.persistent) out[join_name(name, b.name)] = *b.slot;
  });
  return out;
}

void Module::load_state_dict(const TensorMap& state, bool strict) {
  const TensorMap mine = state_dict();
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : mine)
    if (!state.count(name)) missing.push_back(name);
  for (const auto& [name, t] : state)
    if (!mine.count(name)) unexpected.push_back(name);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::string m, u;
    for (const auto& n : missing) m += " " + n;
    for (const auto& n : unexpected) u += " " + n;
    SPMD_THROW(InvalidArgument, "load_state_dict: missing keys:", m.empty() ? " none" : m,
               "; unexpected keys:", u.empty() ? " none" : u);
  }
  NoGradGuard no_grad;
  for (const auto& [name, dst] : mine) {
    auto it = state.find(name);
    if (it == state.end()) continue;
    SPMD_CHECK(it->second.shape() == dst.shape(), "load_state_dict: \"", name, "\" has shape ",
               it->second.shape(), " in the state dict but ", dst.shape(), " in the model");
    ops::copy_(dst, it->second);
  }
}

void Module::save(const std::string& path) const { save_safetensors(path, state_dict()); }

void Module::load(const std::string& path, bool strict) {
  load_state_dict(load_safetensors(path).tensors, strict);
}

// --- Training -------------------------------------------------------------------------------

void Module::train(bool on) {
  visit("", [on](const std::string&, Module& m) { m.training_ = on; });
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      ops::zero_(g);
    }
  }
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

void Module::to(Device device) {
  NoGradGuard no_grad;
  visit("", [device](const std::string&, Module& m) {
    for (auto& [name, slot] : m.params_) {
      if (slot->device() == device) continue;
      const bool requires_grad = slot->requires_grad();
      *slot = ops::to(*slot, device);
      if (requires_grad) slot->requires_grad_();
    }
    for (Buffer& b : m.buffers_) *b.slot = ops::to(*b.slot, device);
  });
}

void Module::buffers_to(Device device) {
  visit("", [device](const std::string&, Module& m) {
    for (Buffer& b : m.buffers_) *b.slot = ops::to(*b.slot, device);
  });
}

void Module::to(DType dtype) {
  NoGradGuard no_grad;
  visit("", [dtype](const std::string&, Module& m) {
    for (auto& [name, slot] : m.params_) {
      if (slot->dtype() == dtype) continue;
      const bool requires_grad = slot->requires_grad();
      *slot = ops::to(*slot, dtype);
      if (requires_grad) slot->requires_grad_();
    }
    for (Buffer& b : m.buffers_)
      if (is_floating(b.slot->dtype())) *b.slot = ops::to(*b.slot, dtype);
  });
}

// --- Hooks -------------------------------------------------------------------------------------

int Module::register_forward_pre_hook(ForwardPreHook hook) {
  pre_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

int Module::register_forward_hook(ForwardHook hook) {
  post_hooks_.emplace_back(next_hook_, std::move(hook));
  return next_hook_++;
}

void Module::remove_hook(int handle) {
  std::erase_if(pre_hooks_, [handle](const auto& h) { return h.first == handle; });
  std::erase_if(post_hooks_, [handle](const auto& h) { return h.first == handle; });
}

// --- ModuleList ----------------------------------------------------------------------------------

void ModuleList::push_back(std::shared_ptr<Module> m) {
  register_module(std::to_string(items_.size()), m);
  items_.push_back(std::move(m));
}

void ModuleList::set(size_t i, std::shared_ptr<Module> m) {
  SPMD_CHECK(i < items_.size(), "ModuleList::set: index ", i, " of ", items_.size());
  replace_child(std::to_string(i), m);
  items_[i] = std::move(m);
}

Tensor ModuleList::forward(const Tensor& x) {
  Tensor h = x;
  for (auto& m : items_) h = (*m)(h);
  return h;
}

}  // namespace spmd::nn
