// Fused scaled-dot-product attention, forward and backward, that never holds
// more than a tile of the (T x S) score matrix: the FlashAttention algorithm
// (Dao et al. 2022; the backward split in two kernels as in FlashAttention-2).
//
// Forward: a block owns 32 query rows; it walks the key/value tiles, keeping
// for each row a running max m, a running sum l of exp(s - m) and the output
// accumulator, rescaled whenever m grows (the online softmax). It saves
// lse = m + log l per row, all the backward needs to rebuild P = exp(S - lse).
// Backward: dK and dV are summed by blocks that own 32 keys and walk the
// query tiles (and, for grouped-query attention, the query heads sharing the
// key head); dQ by blocks that own 32 queries and walk the key tiles. No
// atomics: the result does not depend on timing.
//
// The arithmetic is f32 on CUDA cores (inputs f32, bf16 or f16), head size at
// most 128. Tensor-core tiles (mma) are the next step for speed; this
// version's job is to be right and to keep memory linear in T.
#pragma once

#include "kernels/types.h"

namespace spmd::kernels {

// q (B, H, T, D), k and v (B, Hkv, S, D) with H % Hkv == 0, out (B, H, T, D):
// any strides, one floating dtype (not f64). lse: (B, H, T) contiguous f32.
// causal: query i sees keys j <= i (PyTorch's is_causal, top-left aligned).
bool attention_supported(const TensorArg& q);
void attention_forward(const TensorArg& q, const TensorArg& k, const TensorArg& v,
                       const TensorArg& out, float* lse, bool causal, double scale,
                       Stream stream);
// dq, dk, dv (shapes of q, k, v) are overwritten.
void attention_backward(const TensorArg& dout, const TensorArg& q, const TensorArg& k,
                        const TensorArg& v, const TensorArg& out, const float* lse,
                        const TensorArg& dq, const TensorArg& dk, const TensorArg& dv,
                        bool causal, double scale, Scratch& scratch, Stream stream);

}  // namespace spmd::kernels
