// FLOPs per token, and a GEMM's measured rate (flops.h).
#include "train/flops.h"

#include <algorithm>
#include <chrono>

#include "tensor/ops.h"

namespace spmd::train {

double flops_per_token(const nn::TransformerConfig& c) {
  const double C = double(c.d_model), H = double(c.hidden_dim()), L = double(c.n_layers);
  const double kv_heads = double(c.n_kv_heads == 0 ? c.n_heads : c.n_kv_heads);
  const double kv_dim = C / double(c.n_heads) * kv_heads;
  const double attention = C * (C + 2 * kv_dim) + C * C;  // wq, wk, wv, wo
  const double mlp = (c.activation == nn::TransformerConfig::Activation::kSwiGLU ? 3 : 2) * C * H;
  double weights = double(c.vocab_size) * C;  // the head (tied or not, it is a product)
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const bool moe = c.n_experts > 0 && l % c.moe_every == 0;
    weights += attention + (moe ? C * double(c.n_experts) + double(c.moe_top_k) * mlp : mlp);
  }
  return 6 * weights + 12 * L * C * double(c.max_seq_len);
}

double measured_gemm_flops(const Device& device, int64_t n, int repeats) {
  if (n == 0) n = device.is_cuda() ? 4096 : 512;
  const Tensor a = ops::full({n, n}, 0.5, {DType::kF32, device});
  const Tensor b = ops::full({n, n}, 0.25, {DType::kF32, device});
  (void)ops::matmul(a, b);  // warm-up: threads started, pages touched, kernels loaded
  ops::synchronize(device);
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    (void)ops::matmul(a, b);
    ops::synchronize(device);
    const auto took = std::chrono::steady_clock::now() - start;
    best = std::min(best, std::chrono::duration<double>(took).count());
  }
  return 2.0 * double(n) * double(n) * double(n) / best;
}

}  // namespace spmd::train
