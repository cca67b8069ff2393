// The lists of block_memory.h, read off the ops' backward formulas: what
// each node of TransformerBlock::forward saves (a linear its input, a norm
// its input and statistics, attention q, k, v, its output and log-sum-exp,
// GELU and SiLU their input, a product both factors, dropout its mask), each
// tensor once however many nodes save it.
#include "autograd/nn/block_memory.h"

namespace spmd::nn {
namespace {

struct Widths {
  int64_t C, qkv, H, F, stats;  // stats: 2 for LayerNorm (mean, rstd), 1 for RMSNorm (rstd)
  bool swiglu, dropout;
  bool merge_copies;  // merging attention's heads copies its output (off the CPU)
};

Widths widths_of(const TransformerConfig& c, const Device& device) {
  const int64_t kv_heads = c.n_kv_heads == 0 ? c.n_heads : c.n_kv_heads;
  const int64_t head_dim = c.d_model / c.n_heads;
  return {.C = c.d_model,
          .qkv = c.d_model + 2 * kv_heads * head_dim,
          .H = c.n_heads,
          .F = c.hidden_dim(),
          .stats = c.norm == TransformerConfig::Norm::kLayerNorm ? 2 : 1,
          .swiglu = c.activation == TransformerConfig::Activation::kSwiGLU,
          .dropout = c.dropout > 0,
          .merge_copies = !device.is_cpu()};
}

std::vector<KeptTensor> kept_unwrapped(const Widths& w) {
  std::vector<KeptTensor> k = {
      {"attn_norm's input (the block's input)", w.C},
      {"attn_norm's statistics", w.stats},
      {"attn_norm's output (the q, k, v projections' input)", w.C},
      {"q, k, v (attention's input)", w.qkv},
      {"attention's output", w.C},
      {"attention's log-sum-exp", w.H},
  };
  if (w.merge_copies) k.push_back({"attention's output, heads merged (attn.wo's input)", w.C});
  if (w.dropout) k.push_back({"resid_dropout's mask after attention", w.C});
  k.push_back({"ffn_norm's input", w.C});
  k.push_back({"ffn_norm's statistics", w.stats});
  k.push_back({"ffn_norm's output (the MLP's input)", w.C});
  if (w.swiglu) {
    k.push_back({"mlp.w1's output (SiLU's input)", w.F});
    k.push_back({"SiLU's output", w.F});
    k.push_back({"mlp.w3's output", w.F});
    k.push_back({"SiLU(w1 x) * w3 x (mlp.w2's input)", w.F});
  } else {
    k.push_back({"mlp.w1's output (GELU's input)", w.F});
    k.push_back({"GELU's output (mlp.w2's input)", w.F});
  }
  if (w.dropout) k.push_back({"resid_dropout's mask after the MLP", w.C});
  return k;
}

// The block's input and the outputs of its listed ops (autograd/selective_checkpoint.h).
std::vector<KeptTensor> kept_selective(const Widths& w) {
  std::vector<KeptTensor> k = {
      {"the block's input", w.C},  {"the q, k, v projections' outputs", w.qkv},
      {"attention's output", w.C}, {"attention's log-sum-exp", w.H},
      {"attn.wo's output", w.C},   {"mlp.w1's output", w.F},
  };
  if (w.swiglu) k.push_back({"mlp.w3's output", w.F});
  k.push_back({"mlp.w2's output", w.C});
  return k;
}

}  // namespace

std::vector<KeptTensor> kept_for_backward(const TransformerConfig& config, BlockCheckpointing mode,
                                          const Device& device) {
  SPMD_CHECK(config.n_experts == 0, "kept_for_backward: a model with MoE blocks (n_experts ",
             config.n_experts, ") is not counted; dense blocks only");
  const Widths w = widths_of(config, device);
  switch (mode) {
    case BlockCheckpointing::kNone:
      return kept_unwrapped(w);
    case BlockCheckpointing::kFull:
      return {{"the block's input", w.C}};
    case BlockCheckpointing::kSelective:
      return kept_selective(w);
  }
  return {};
}

int64_t kept_per_token(const TransformerConfig& config, BlockCheckpointing mode,
                       const Device& device) {
  int64_t n = 0;
  for (const KeptTensor& t : kept_for_backward(config, mode, device)) n += t.per_token;
  return n;
}

}  // namespace spmd::nn
