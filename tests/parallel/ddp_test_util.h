// Small models and helpers shared by the DDP tests.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/layers.h"
#include "parallel/comm/process_group.h"
#include "tensor/ops.h"

namespace spmd::dist::testing {

// A stack of width x width tanh layers, and a spare Linear that forward
// uses only when use_spare is set (for the unused-parameter cases).
class Mlp : public nn::Module {
 public:
  Mlp(int64_t width, int layers, uint64_t seed, int64_t spare_out = 0) {
    Generator gen(seed);
    for (int i = 0; i < layers; ++i) {
      fc.push_back(register_module("fc" + std::to_string(i),
                                   std::make_shared<nn::Linear>(width, width, true, &gen)));
    }
    if (spare_out > 0)
      spare = register_module("spare", std::make_shared<nn::Linear>(width, spare_out, true, &gen));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& layer : fc) h = tanh((*layer)(h));
    if (use_spare) h = (*spare)(h);
    return h;
  }
  std::string type_name() const override { return "Mlp"; }

  std::vector<std::shared_ptr<nn::Linear>> fc;
  std::shared_ptr<nn::Linear> spare;
  bool use_spare = false;
};

// DDP keeps a shared_ptr to its group; the harness owns the group for the
// whole rank function, so the tests lend it without ownership.
inline std::shared_ptr<ProcessGroup> borrow(ProcessGroup& group) {
  return std::shared_ptr<ProcessGroup>(&group, [](ProcessGroup*) {});
}

// ||a - b|| / ||b|| over all elements (0 when both are zero).
inline double relative_difference(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = ops::to_vector<double>(a), y = ops::to_vector<double>(b);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (x[i] - y[i]) * (x[i] - y[i]);
    norm += y[i] * y[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace spmd::dist::testing
