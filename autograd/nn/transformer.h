// The Transformer language model, in the GPT-2 or the Llama shape.
//
//   ids (B, T) -> tok_embeddings (+ pos_embeddings) -> dropout
//              -> layers.0 ... layers.{L-1}   (TransformerBlock: pre-norm
//                 attention and MLP, each added to the residual stream)
//              -> norm -> output (or tok_embeddings.weight^T when tied)
//              -> logits (B, T, V)
//
// GPT-2: LayerNorm, GELU (tanh) MLP of 4C, learned positions, one fused
// qkv Linear with bias, head tied to the token embedding. Llama: RMSNorm,
// SwiGLU MLP, RoPE, separate wq/wk/wv (grouped-query when n_kv_heads <
// n_heads), no biases, untied head. The model knows nothing of parallelism;
// strategies find its layers by name ("layers.3.attn.wqkv").
#pragma once

#include <map>
#include <string>

#include "autograd/nn/attention.h"
#include "autograd/nn/layers.h"
#include "autograd/nn/moe.h"

namespace spmd::nn {

struct TransformerConfig {
  enum class Norm { kLayerNorm, kRMSNorm };
  enum class Activation { kGelu, kSwiGLU };
  enum class Positions { kLearned, kRope };

  int64_t vocab_size = 256;
  int64_t max_seq_len = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  // 0: n_heads
  int64_t d_model = 128;
  int64_t ffn_hidden = 0;  // 0: 4 d_model (GELU), or Llama's 2/3 of it rounded up to 64 (SwiGLU)
  Norm norm = Norm::kLayerNorm;
  Activation activation = Activation::kGelu;
  Positions positions = Positions::kLearned;
  bool bias = true;
  bool fused_qkv = true;
  bool tie_embeddings = true;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
  double dropout = 0.0;
  // The fused CPU/GPU kernels of a block (docs/cpu.md): bias + GELU in the
  // MLP. false runs the unfused composition, the reference the tests hold the
  // fused path to.
  bool fused_kernels = true;
  // Mixture of experts (nn::MoE) in place of the MLP: 0 experts keeps every
  // block dense. Blocks 0, moe_every, 2 moe_every, ... (Megatron's
  // moe_layer_freq) get n_experts experts of hidden_dim() each, top moe_top_k
  // per token; moe_capacity_factor 0 drops no token.
  int64_t n_experts = 0;
  int64_t moe_top_k = 2;
  int64_t moe_every = 1;
  double moe_capacity_factor = 0.0;

  static TransformerConfig gpt2(int64_t vocab_size, int64_t max_seq_len, int64_t n_layers,
                                int64_t n_heads, int64_t d_model);
  static TransformerConfig llama(int64_t vocab_size, int64_t max_seq_len, int64_t n_layers,
                                 int64_t n_heads, int64_t n_kv_heads, int64_t d_model);
  // The named GPT-2 configs of the benchmark: "tiny" (4 layers, 4 heads, C 128,
  // T 128: 842,496 parameters), "small" (6, 6, 384, T 256: 10,844,160) and
  // "gpt2", GPT-2 124M (12, 12, 768, T 1024, vocabulary 50304: 124,475,904).
  // And Llama 3.1's shapes, T 8192, vocabulary 128256, 8 kv heads:
  // "llama3.1-8b" (32 layers, 32 heads, C 4096, FFN 14336: 8,030,261,248),
  // "llama3.1-70b" (80, 64, 8192, FFN 28672: 70,553,706,496) and
  // "llama3.1-405b" (126, 128, 16384, FFN 53248: 405,853,388,800). A preset
  // is a shape only: building its Transformer allocates every parameter, so
  // the Llama ones are for the memory plan and spmd-plan (docs/planner.md).
  static TransformerConfig preset(const std::string& name);
  int64_t hidden_dim() const;
};

// The feed-forward half of a block: w2(gelu(w1 x)) or w2(silu(w1 x) * w3 x).
// With `fused` (on the CPU, with a bias, and no hook on w1), w1's bias and
// the GELU run as one bias_gelu over the product x W1^T.
class MLP : public Module {
 public:
  MLP(const TransformerConfig& config, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "MLP"; }

  const bool swiglu;
  bool fused;
  std::shared_ptr<Linear> w1, w2, w3;  // w3 for SwiGLU only
};

// x + attn(attn_norm(x)), then h + mlp(ffn_norm(h)) (or moe(ffn_norm(h))).
class TransformerBlock : public Module {
 public:
  // moe_block: nn::MoE (registered as "moe") in place of the MLP.
  TransformerBlock(const TransformerConfig& config, Generator* gen = nullptr,
                   bool moe_block = false);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "TransformerBlock"; }

  std::shared_ptr<Module> attn_norm, ffn_norm;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<MLP> mlp;  // null in an MoE block
  std::shared_ptr<MoE> moe;  // null in a dense block
  std::shared_ptr<Dropout> resid_dropout;
};

class Transformer : public Module {
 public:
  // Parameters drawn with `seed` (GPT-2's scheme: N(0, 0.02), residual
  // projections scaled by 1/sqrt(2 n_layers), zero biases, unit norms),
  // each from a key of its own (tensor/deferred.h). Built under
  // DefaultDeviceGuard(Device::meta()) the parameters have no bytes (the
  // RoPE tables, buffers, are built on the CPU all the same); whoever
  // gives them bytes fills them through init_parameter.
  explicit Transformer(const TransformerConfig& config, uint64_t seed = 0);
  // ids (B, T) integers -> logits (B, T, V)
  Tensor forward(const Tensor& ids) override;
  std::string type_name() const override { return "Transformer"; }

  const TransformerConfig config;
  std::shared_ptr<Embedding> tok_embeddings, pos_embeddings;  // pos: learned positions only
  std::shared_ptr<Dropout> dropout;
  std::shared_ptr<ModuleList> layers;
  std::shared_ptr<Module> norm;
  std::shared_ptr<Linear> output;  // null when tied to tok_embeddings

  // Fills `piece`, the box at `offset` of parameter `name` (a name of
  // named_parameters(), whose whole shape is `whole`), with its initial
  // values: the bits the one-process model holds there, whichever rank
  // fills which box. No gradient is recorded.
  void init_parameter(const std::string& name, const Tensor& piece, const Shape& whole,
                      const Shape& offset) const;

 private:
  struct ParamInit {
    enum class Kind : uint8_t { kNormal, kZeros, kOnes };
    Kind kind;
    double std;  // kNormal's
  };
  void plan_init();
  void init_weights();

  uint64_t seed_;
  std::map<std::string, ParamInit> init_;  // by parameter name
};

}  // namespace spmd::nn
