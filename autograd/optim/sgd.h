// Stochastic gradient descent with momentum, as torch.optim.SGD:
//   g = grad + weight_decay p
//   buf = g on the first step, then momentum buf + (1 - dampening) g
//   g = g + momentum buf (nesterov) or buf
//   p -= lr g
#pragma once

#include "autograd/optim/optimizer.h"

namespace spmd::optim {

struct SGDOptions {
  double lr = 1e-2;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options);
  void step() override;
  TensorMap state_dict() const override;
  void load_state_dict(const TensorMap& state) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> momentum_;  // per parameter; undefined until its first step
};

}  // namespace spmd::optim
