// Multi-head causal self-attention, in the two shapes the Transformer needs:
//
//   GPT-2:  one fused projection wqkv (C -> 3C, with bias) whose output is
//           split into q, k, v; learned positions are added before the block.
//   Llama:  separate wq (C -> H*D), wk and wv (C -> Hkv*D: grouped-query
//           attention when Hkv < H), no bias; rotary embeddings (RoPE) turn
//           q and k by their position.
//
// Both end in wo (H*D -> C). Shapes: B batch, T sequence, C model width, H
// heads of size D = C/H, Hkv key/value heads.
#pragma once

#include <functional>

#include "autograd/nn/layers.h"
#include "tensor/nn_ops.h"

namespace spmd::nn {

struct AttentionOptions {
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;  // 0: n_heads (plain multi-head)
  bool fused_qkv = true;   // one wqkv projection (GPT-2) or wq, wk, wv (Llama)
  bool bias = true;
  bool rope = false;
  int64_t max_seq_len = 0;  // the RoPE tables' length
  double rope_theta = 10000.0;
};

class CausalSelfAttention : public Module {
 public:
  explicit CausalSelfAttention(const AttentionOptions& options, Generator* gen = nullptr);
  // x (B, T, C) -> (B, T, C)
  Tensor forward(const Tensor& x) override;

  // The first half of forward: x (B, T, C) projected to q (B, T, H, D) and
  // k, v (B, T, Hkv, D), not yet rotated. Generation (nn/generate.h) calls
  // it, then rotate, and attends over its cache of earlier keys and values.
  struct Projected {
    Tensor q, k, v;
  };
  Projected project(const Tensor& x);
  // x (B, T, heads, D) rotated for positions start .. start + T - 1 (the
  // identity without RoPE). REQUIRES: start + T <= max_seq_len (checked).
  Tensor rotate(const Tensor& x, int64_t start) const;
  std::string type_name() const override { return "CausalSelfAttention"; }

  const AttentionOptions options;
  const int64_t head_dim;
  std::shared_ptr<Linear> wqkv;        // fused_qkv only
  std::shared_ptr<Linear> wq, wk, wv;  // !fused_qkv only
  std::shared_ptr<Linear> wo;

  // The attention of q (B, H, T, D) with k, v (B, Hkv, T, D), causal. Unset:
  // scaled_dot_product_attention. A strategy that splits the sequence over
  // ranks (context parallelism's ring attention) sets its own.
  std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)> attention_fn;

  // The rows of a RoPE table (cos or sin, (max_seq_len, D/2)) for the T
  // tokens of a forward. Unset: rows 0 .. T-1, the tokens being the
  // sequence's first T. A strategy whose tokens sit elsewhere in the
  // sequence (context parallelism's chunks) gives their positions' rows.
  std::function<Tensor(const Tensor& table, int64_t T)> rope_rows;

 private:
  Tensor rope_cos_, rope_sin_;  // (max_seq_len, D/2) non-persistent buffers
};

}  // namespace spmd::nn
