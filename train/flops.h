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
#pragma once

#include <cstdint>

#include "autograd/nn/transformer.h"

namespace spmd::train {

// Training FLOPs per token of a model of this config (forward and backward).
double flops_per_token(const nn::TransformerConfig& config);

// FLOP/s of an f32 GEMM of n x n x n on `device` (the CPU: this process's
// threads), the best of `repeats` timed runs after one warm-up: the peak
// MFU is measured against when none is given (metrics.peak_tflops = 0).
// n = 0: 512 on the CPU, 4096 on a GPU.
double measured_gemm_flops(const Device& device = Device::cpu(), int64_t n = 0, int repeats = 3);

}  // namespace spmd::train
