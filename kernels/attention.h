// Fused scaled-dot-product attention, forward and backward, that never holds
// more than a tile of the (T x S) score matrix: the FlashAttention algorithm
// (Dao et al. 2022; the backward split in two kernels as in FlashAttention-2).
//
// Forward: a block owns a tile of query rows; it walks the key/value tiles, keeping
// for each row a running max m, a running sum l of exp(s - m) and the output
// accumulator, rescaled whenever m grows (the online softmax). It saves
// lse = m + log l per row, all the backward needs to rebuild P = exp(S - lse).
// Backward: dK and dV are summed by blocks that own a tile of keys and walk
// the query tiles (and, for grouped-query attention, the query heads sharing
// the key head); dQ by blocks that own a tile of queries and walk the key
// tiles. No
// atomics: the result does not depend on timing.
//
// Two implementations: for bf16 and f16 with head size 64 or 128, tiles of
// 64 x 64 whose products run on tensor cores (WMMA fragments, f32
// accumulation; attention_tc.cu); otherwise (f32 inputs, other head sizes up
// to 128) tiles of 32 x 32 in f32 on CUDA cores (attention.cu). Both keep
// memory linear in T and compute the softmax in f32.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// q (B, H, T, D), k and v (B, Hkv, S, D) with H % Hkv == 0, out (B, H, T, D):
// any strides, one floating dtype (not f64). lse: (B, H, T) contiguous f32.
// causal: query i sees keys j <= i (PyTorch's is_causal, top-left aligned).
bool attention_supported(const TensorArg& q);

// Which kernels to use: kAuto takes tensor cores where they apply; kSimt
// forces the f32 CUDA-core kernels (to compare the two).
enum class AttentionKernel : uint8_t { kAuto, kSimt };

void attention_forward(const TensorArg& q, const TensorArg& k, const TensorArg& v,
                       const TensorArg& out, float* lse, bool causal, double scale,
                       AttentionKernel which, Stream stream);
// dq, dk, dv (shapes of q, k, v) are overwritten.
void attention_backward(const TensorArg& dout, const TensorArg& q, const TensorArg& k,
                        const TensorArg& v, const TensorArg& out, const float* lse,
                        const TensorArg& dq, const TensorArg& dk, const TensorArg& dv, bool causal,
                        double scale, AttentionKernel which, Scratch& scratch, Stream stream);

}  // namespace spmd::kernels
