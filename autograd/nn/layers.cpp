// The basic layers: parameters, initialization, and one differentiable op each.
#include "autograd/nn/layers.h"

#include <cmath>

#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias, Generator* gen) {
  SPMD_CHECK(in_features > 0 && out_features > 0, "Linear: sizes must be positive, got in ",
             in_features, ", out ", out_features);
  const double bound = 1.0 / std::sqrt(double(in_features));
  weight = ops::uniform({out_features, in_features}, -bound, bound, {}, gen);
  if (has_bias) bias = ops::uniform({out_features}, -bound, bound, {}, gen);
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Embedding::Embedding(int64_t num_embeddings, int64_t dim, Generator* gen) {
  SPMD_CHECK(num_embeddings > 0 && dim > 0, "Embedding: sizes must be positive, got ",
             num_embeddings, " x ", dim);
  weight = ops::randn({num_embeddings, dim}, {}, gen);
  register_parameter("weight", weight);
}

Tensor Embedding::forward(const Tensor& ids) { return embedding(weight, ids); }

LayerNorm::LayerNorm(int64_t dim, double eps, bool has_bias) : eps(eps) {
  weight = ops::ones({dim});
  if (has_bias) bias = ops::zeros({dim});
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) { return layer_norm(x, weight, bias, eps); }

RMSNorm::RMSNorm(int64_t dim, double eps) : eps(eps) {
  weight = ops::ones({dim});
  register_parameter("weight", weight);
}

Tensor RMSNorm::forward(const Tensor& x) { return rms_norm(x, weight, eps); }

Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, is_training()); }

}  // namespace spmd::nn
