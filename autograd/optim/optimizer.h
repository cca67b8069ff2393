// The optimizer interface, as torch.optim.Optimizer: parameter groups (each
// with its own learning rate and weight decay), step() and zero_grad().
// Parameters whose gradient is undefined after backward are left alone.
//
// State (momentum buffers, Adam moments) is kept per parameter in the order
// of the groups, and exported by state_dict() under "state.<i>.<name>" with i
// the parameter's index across all groups (PyTorch's numbering).
#pragma once

#include <string>
#include <vector>

#include "tensor/safetensors.h"
#include "tensor/tensor.h"

namespace spmd::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double lr = 1e-3;
  double weight_decay = 0.0;
};

class Optimizer {
 public:
  explicit Optimizer(std::vector<ParamGroup> groups);
  virtual ~Optimizer() = default;

  // One update of every parameter that has a gradient. Runs with grad mode off.
  virtual void step() = 0;
  // Drops (set_to_none) or zeroes every parameter's gradient.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  // Sets every group's learning rate (what an LR schedule calls each step).
  void set_lr(double lr);
  double lr() const { return groups_.at(0).lr; }

  virtual TensorMap state_dict() const = 0;
  virtual void load_state_dict(const TensorMap& state) = 0;

 protected:
  // Calls f(param, group, index) for every parameter, index across all groups.
  template <class F>
  void for_each_param(F&& f) {
    size_t index = 0;
    for (ParamGroup& g : groups_)
      for (Tensor& p : g.params) f(p, g, index++);
  }
  size_t num_params() const;

 private:
  std::vector<ParamGroup> groups_;
};

}  // namespace spmd::optim
