// The basic layers: Linear, Embedding, LayerNorm, RMSNorm, Dropout. Each
// holds its parameters as public members, registered under PyTorch's names
// (weight, bias), and initializes them as PyTorch does; models that want
// another scheme (GPT-2's normal(0, 0.02)) overwrite them after construction.
#pragma once

#include "autograd/nn/module.h"
#include "tensor/random.h"

namespace spmd::nn {

// y = x W^T + b, W (out, in). Initialized U(-1/sqrt(in), 1/sqrt(in)) as torch.nn.Linear.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }

  Tensor weight;  // (out, in)
  Tensor bias;    // (out), or undefined
};

// Rows of a (V, C) table at integer ids. Initialized N(0, 1) as torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator* gen = nullptr);
  Tensor forward(const Tensor& ids) override;
  std::string type_name() const override { return "Embedding"; }

  Tensor weight;  // (V, C)
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }

  Tensor weight, bias;  // ones, zeros
  double eps;
};

class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "RMSNorm"; }

  Tensor weight;  // ones
  double eps;
};

// Zeroes elements with probability p while training (see spmd::dropout).
class Dropout : public Module {
 public:
  explicit Dropout(double p) : p(p) {}
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Dropout"; }

  double p;
};

}  // namespace spmd::nn
