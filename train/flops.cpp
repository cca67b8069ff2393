// FLOPs per token, a GEMM's measured rate, and the hardware's peak, each
// with the words that say what it is (flops.h).
#include "train/flops.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "tensor/cpu/peak.h"
#include "tensor/cuda_api.h"
#include "tensor/gpu_peak.h"
#include "tensor/ops.h"

namespace spmd::train {
namespace {

// The datasheet peak of the GPU that `device` is (gpu_peak.h), for `bf16` or f32 products.
PeakFlops gpu_peak(const Device& device, bool bf16) {
  const std::string name = cuda::device_name(device.index);
  const std::optional<cuda::GpuPeak> p = cuda::datasheet_peak(name);
  if (!p) return {0, str_cat("no datasheet peak for the GPU \"", name, "\"")};
  const std::string of =
      str_cat(" of the ", p->model, " (datasheet; CUDA names it \"", name, "\")");
  if (bf16) return {p->bf16, "the dense bf16 tensor-core peak" + of};
  if (cuda::allow_tf32()) return {p->tf32, "the dense TF32 tensor-core peak (allow_tf32)" + of};
  return {p->f32, "the f32 CUDA-core peak (TF32 off)" + of};
}

}  // namespace

double attention_weights(const nn::TransformerConfig& c) {
  const double C = double(c.d_model);
  const double kv_heads = double(c.n_kv_heads == 0 ? c.n_heads : c.n_kv_heads);
  const double kv_dim = C / double(c.n_heads) * kv_heads;
  return C * (C + 2 * kv_dim) + C * C;  // wq, wk, wv, wo
}

double block_weights(const nn::TransformerConfig& c, int64_t layer) {
  const double C = double(c.d_model), H = double(c.hidden_dim());
  const double attention = attention_weights(c);
  const double mlp = (c.activation == nn::TransformerConfig::Activation::kSwiGLU ? 3 : 2) * C * H;
  const bool moe = c.n_experts > 0 && layer % c.moe_every == 0;
  return attention + (moe ? C * double(c.n_experts) + double(c.moe_top_k) * mlp : mlp);
}

double head_weights(const nn::TransformerConfig& c) {
  return double(c.vocab_size) * double(c.d_model);  // tied or not, it is a product
}

double flops_per_token(const nn::TransformerConfig& c) {
  double weights = head_weights(c);
  for (int64_t l = 0; l < c.n_layers; ++l) weights += block_weights(c, l);
  return 6 * weights + 12 * double(c.n_layers) * double(c.d_model) * double(c.max_seq_len);
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

namespace {

// The seconds one run of `op` takes on average over a window of `seconds`
// (at least 3 runs, after one warm-up): every run in the window, and the
// time between them, counted. Ranks sharing the cores take turns; a run
// shorter than the scheduler's slice rarely sees the others, the window does.
double sustained_seconds(const Device& device, double seconds, const std::function<void()>& op) {
  op();
  ops::synchronize(device);
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  int64_t runs = 0;
  while (runs < 3 || std::chrono::steady_clock::now() < until) {
    op();
    ops::synchronize(device);
    ++runs;
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
         double(runs);
}

}  // namespace

DeviceRates measured_rates(const Device& device, double seconds) {
  DeviceRates r;
  r.gemm_n = device.is_cuda() ? 4096 : 512;
  const int64_t n = r.gemm_n;
  {
    const Tensor a = ops::full({n, n}, 0.5, {DType::kF32, device});
    const Tensor b = ops::full({n, n}, 0.25, {DType::kF32, device});
    const double s = sustained_seconds(device, seconds / 2, [&] { (void)ops::matmul(a, b); });
    r.gemm_flops = 2.0 * double(n) * double(n) * double(n) / s;
  }
  r.add_bytes = device.is_cuda() ? int64_t(1) << 30 : int64_t(64) << 20;
  const int64_t elements = r.add_bytes / 4;
  Tensor a = ops::full({elements}, 0.5, {DType::kF32, device});
  const Tensor b = ops::full({elements}, 0.25, {DType::kF32, device});
  const double s = sustained_seconds(device, seconds / 2, [&] { ops::add_(a, b); });  // a = a + b
  r.memory_bw = 3.0 * double(r.add_bytes) / s;
  return r;
}

PeakFlops hardware_peak(const Device& device, const std::string& precision, int threads) {
  const bool bf16 = precision == "bf16";
  if (device.is_cuda()) return gpu_peak(device, bf16);
  const cpu::CpuPeak& p = cpu::cpu_peak();
  const double per_core = bf16 ? p.bf16_per_core() : p.f32_per_core();
  char ghz[16];
  std::snprintf(ghz, sizeof ghz, "%.2f", p.clock_hz / 1e9);
  // threads x lanes x 2 FLOPs x ports x clock, as the product is computed.
  const std::string f32 =
      str_cat(threads, threads == 1 ? " thread" : " threads", " x ", p.lanes, " lanes x 2 FLOPs x ",
              p.fma_ports, " FMA ports x ", ghz, " GHz (measured)");
  if (!bf16) return {threads * per_core, "the f32 peak: " + f32};
  return {threads * per_core, p.bf16_dot ? "the bf16 peak: 2 (AVX512_BF16) x " + f32
                                         : "the bf16 peak, the f32 one (no AVX512_BF16): " + f32};
}

std::string format_flops(double flops_per_s) {
  char s[32];
  if (flops_per_s >= 1e12) {
    std::snprintf(s, sizeof s, "%.1f TFLOP/s", flops_per_s / 1e12);
  } else {
    std::snprintf(s, sizeof s, "%.1f GFLOP/s", flops_per_s / 1e9);
  }
  return s;
}

}  // namespace spmd::train
