// Model FLOPs utilization (MFU): the FLOPs a step of the model needs, per
// token, against what the hardware could do in the step's time (PaLM's
// definition, Appendix B: only the model's arithmetic counts, not the
// recomputation of activation checkpointing nor any communication).
//
//   flops per token = 6 x (weights a token multiplies by) + 12 x L x C x T
//
// 6: a multiply-add is 2 FLOPs, and backward costs twice forward (the
// gradients of the input and of the weight). The weights a token meets are
// each block's attention projections and MLP (with experts: the router and
// top_k experts' MLPs, not all n_experts), and the head; embeddings are
// lookups. 12 L C T is attention's two products, q k^T and p v, whose
// "weights" are the sequence itself (T keys per query; causal masking is not
// discounted, as PaLM does not).
//
// The rate it is set against is the hardware's peak, as TorchTitan's MFU:
// the CPU's from its vector lanes, FMA ports and measured clock
// (tensor/cpu/peak.h) times the rank's threads, a GPU's from its datasheet
// (tensor/gpu_peak.h). A GEMM measured at start is the second yardstick: how
// far the step is from what the BLAS reaches on its best shape.
#pragma once

#include <cstdint>
#include <string>

#include "autograd/nn/transformer.h"

namespace spmd::train {

// Training FLOPs per token of a model of this config (forward and backward).
double flops_per_token(const nn::TransformerConfig& config);

// The weights one token is multiplied by in block `layer` (its attention
// projections and MLP; in an MoE block the router and top_k experts' MLPs),
// and in the head: the two parts of flops_per_token's first term.
double block_weights(const nn::TransformerConfig& config, int64_t layer);
// Of a block's weights, its attention projections' (wq, wk, wv, wo).
double attention_weights(const nn::TransformerConfig& config);
double head_weights(const nn::TransformerConfig& config);

// FLOP/s of an f32 GEMM of n x n x n on `device` (the CPU: this process's
// threads), the best of `repeats` timed runs after one warm-up: the GEMM
// ceiling of gemm_mfu, and the peak of mfu on a GPU the datasheet table
// does not know. n = 0: 512 on the CPU, 4096 on a GPU.
double measured_gemm_flops(const Device& device = Device::cpu(), int64_t n = 0, int repeats = 3);

// The rates spmd-plan times a device by (--measure), each the work done
// over a window of seconds / 2, not its best run: on a machine whose cores
// the ranks share, what the ranks' steps meet is their share of the window.
//   gemm_flops  an f32 GEMM of n x n x n (n as measured_gemm_flops);
//   memory_bw   an elementwise add a += b over buffers of 64 MiB (a GPU's:
//               1 GiB), its two reads and one write over its time, as
//               STREAM's "Add" counts it: the bandwidth the ops other than
//               the products meet (train/step_traffic.h).
struct DeviceRates {
  double gemm_flops = 0, memory_bw = 0;
  int64_t gemm_n = 0, add_bytes = 0;  // the sizes measured: n, and one buffer's bytes
};
DeviceRates measured_rates(const Device& device, double seconds);

// A peak FLOP/s per rank, and what it is, for the start-up line.
struct PeakFlops {
  double flops = 0;  // 0: no figure known (`what` says why)
  std::string what;  // "the f32 peak: 1 thread x 16 lanes x 2 FLOPs x ..."
};

// The hardware's peak per rank for arithmetic in `precision`
// (training.mixed_precision, "f32" or "bf16") on `device`. The CPU:
// cpu::cpu_peak()'s per core (measured at the first call) x `threads`. A GPU:
// its datasheet's dense bf16, or for f32 its TF32 when cuda::allow_tf32() is
// on, else its CUDA cores' f32; flops = 0 for a GPU not in the table.
PeakFlops hardware_peak(const Device& device, const std::string& precision, int threads);

// "153.6 GFLOP/s", "989.0 TFLOP/s".
std::string format_flops(double flops_per_s);

}  // namespace spmd::train
