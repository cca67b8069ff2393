// The Transformer: configs, the MLP, the block, the model and its init.
#include "autograd/nn/transformer.h"

#include <cmath>

#include "autograd/grad_mode.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "tensor/deferred.h"
#include "tensor/ops.h"

namespace spmd::nn {

// --- Config ---------------------------------------------------------------------------

TransformerConfig TransformerConfig::gpt2(int64_t vocab_size, int64_t max_seq_len, int64_t n_layers,
                                          int64_t n_heads, int64_t d_model) {
  TransformerConfig c;
  c.vocab_size = vocab_size;
  c.max_seq_len = max_seq_len;
  c.n_layers = n_layers;
  c.n_heads = n_heads;
  c.d_model = d_model;
  return c;  // the defaults are GPT-2's
}

TransformerConfig TransformerConfig::llama(int64_t vocab_size, int64_t max_seq_len,
                                           int64_t n_layers, int64_t n_heads, int64_t n_kv_heads,
                                           int64_t d_model) {
  TransformerConfig c = gpt2(vocab_size, max_seq_len, n_layers, n_heads, d_model);
  c.n_kv_heads = n_kv_heads;
  c.norm = Norm::kRMSNorm;
  c.activation = Activation::kSwiGLU;
  c.positions = Positions::kRope;
  c.bias = false;
  c.fused_qkv = false;
  c.tie_embeddings = false;
  c.norm_eps = 1e-6;
  return c;
}

TransformerConfig TransformerConfig::preset(const std::string& name) {
  if (name == "tiny") return gpt2(256, 128, 4, 4, 128);
  if (name == "small") return gpt2(256, 256, 6, 6, 384);
  if (name == "gpt2") return gpt2(50304, 1024, 12, 12, 768);
  // Llama 3.1's published shapes (Meta's model cards and params.json): the
  // vocabulary of 128,256, 8 kv heads, RoPE base 500,000, and FFN sizes that
  // are set, not derived (14336 is not 2/3 of 4 x 4096 rounded to 64).
  const auto llama31 = [](int64_t n_layers, int64_t n_heads, int64_t d_model, int64_t ffn) {
    TransformerConfig c = llama(128256, 8192, n_layers, n_heads, 8, d_model);
    c.ffn_hidden = ffn;
    c.norm_eps = 1e-5;
    c.rope_theta = 500000.0;
    return c;
  };
  if (name == "llama3.1-8b") return llama31(32, 32, 4096, 14336);
  if (name == "llama3.1-70b") return llama31(80, 64, 8192, 28672);
  if (name == "llama3.1-405b") return llama31(126, 128, 16384, 53248);
  SPMD_THROW(InvalidArgument, "TransformerConfig: unknown preset \"", name,
             "\" (known: tiny, small, gpt2, llama3.1-8b, llama3.1-70b, llama3.1-405b)");
}

int64_t TransformerConfig::hidden_dim() const {
  if (ffn_hidden > 0) return ffn_hidden;
  if (activation == Activation::kGelu) return 4 * d_model;
  const int64_t h = 2 * (4 * d_model) / 3;  // SwiGLU's three matrices cost what GELU's two do
  return (h + 63) / 64 * 64;
}

namespace {
std::shared_ptr<Module> make_norm(const TransformerConfig& c) {
  if (c.norm == TransformerConfig::Norm::kRMSNorm)
    return std::make_shared<RMSNorm>(c.d_model, c.norm_eps);
  return std::make_shared<LayerNorm>(c.d_model, c.norm_eps, c.bias);
}
}  // namespace

// --- MLP and block -------------------------------------------------------------------------

MLP::MLP(const TransformerConfig& c, Generator* gen)
    : swiglu(c.activation == TransformerConfig::Activation::kSwiGLU), fused(c.fused_kernels) {
  const int64_t hidden = c.hidden_dim();
  w1 = register_module("w1", std::make_shared<Linear>(c.d_model, hidden, c.bias, gen));
  w2 = register_module("w2", std::make_shared<Linear>(hidden, c.d_model, c.bias, gen));
  if (swiglu) w3 = register_module("w3", std::make_shared<Linear>(c.d_model, hidden, c.bias, gen));
}

Tensor MLP::forward(const Tensor& x) {
  if (swiglu) return (*w2)(mul(silu((*w1)(x)), (*w3)(x)));
  // Only the CPU backend has a bias + GELU kernel; elsewhere Backend's
  // composed default would add a pass to the backward, not remove one.
  if (fused && x.device().is_cpu() && w1->bias.defined() && !w1->has_hooks()) {
    return (*w2)(bias_gelu(linear(x, w1->weight), w1->bias, /*approximate=*/true));
  }
  return (*w2)(gelu((*w1)(x), /*approximate=*/true));
}

TransformerBlock::TransformerBlock(const TransformerConfig& c, Generator* gen, bool moe_block) {
  AttentionOptions a;
  a.d_model = c.d_model;
  a.n_heads = c.n_heads;
  a.n_kv_heads = c.n_kv_heads;
  a.fused_qkv = c.fused_qkv;
  a.bias = c.bias;
  a.rope = c.positions == TransformerConfig::Positions::kRope;
  a.max_seq_len = c.max_seq_len;
  a.rope_theta = c.rope_theta;
  attn_norm = register_module("attn_norm", make_norm(c));
  attn = register_module("attn", std::make_shared<CausalSelfAttention>(a, gen));
  ffn_norm = register_module("ffn_norm", make_norm(c));
  if (moe_block) {
    MoEOptions m{.d_model = c.d_model,
                 .hidden = c.hidden_dim(),
                 .n_experts = c.n_experts,
                 .top_k = c.moe_top_k,
                 .swiglu = c.activation == TransformerConfig::Activation::kSwiGLU,
                 .bias = c.bias,
                 .capacity_factor = c.moe_capacity_factor};
    moe = register_module("moe", std::make_shared<MoE>(m, gen));
  } else {
    mlp = register_module("mlp", std::make_shared<MLP>(c, gen));
  }
  resid_dropout = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor TransformerBlock::forward(const Tensor& x) {
  const Tensor h = add(x, (*resid_dropout)((*attn)((*attn_norm)(x))));
  const Tensor ffn = mlp ? (*mlp)((*ffn_norm)(h)) : (*moe)((*ffn_norm)(h));
  return add(h, (*resid_dropout)(ffn));
}

// --- The model -------------------------------------------------------------------------------

Transformer::Transformer(const TransformerConfig& c, uint64_t seed) : config(c), seed_(seed) {
  SPMD_CHECK(c.vocab_size > 0 && c.max_seq_len > 0 && c.n_layers > 0, "Transformer: vocab_size ",
             c.vocab_size, ", max_seq_len ", c.max_seq_len, ", n_layers ", c.n_layers,
             " must be positive");
  Generator gen(seed);
  tok_embeddings =
      register_module("tok_embeddings", std::make_shared<Embedding>(c.vocab_size, c.d_model, &gen));
  if (c.positions == TransformerConfig::Positions::kLearned) {
    pos_embeddings = register_module("pos_embeddings",
                                     std::make_shared<Embedding>(c.max_seq_len, c.d_model, &gen));
  }
  dropout = register_module("dropout", std::make_shared<Dropout>(c.dropout));
  layers = register_module("layers", std::make_shared<ModuleList>());
  SPMD_CHECK(c.n_experts == 0 || c.moe_every > 0, "Transformer: moe_every ", c.moe_every,
             " must be positive");
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const bool moe_block = c.n_experts > 0 && i % c.moe_every == 0;
    layers->push_back(std::make_shared<TransformerBlock>(c, &gen, moe_block));
  }
  norm = register_module("norm", make_norm(c));
  if (!c.tie_embeddings) {
    output =
        register_module("output", std::make_shared<Linear>(c.d_model, c.vocab_size, false, &gen));
  }
  plan_init();
  init_weights();
}

// GPT-2's initialization (as nanoGPT): every Linear and Embedding weight
// N(0, 0.02), the projections into the residual stream (attn.wo, mlp.w2)
// N(0, 0.02 / sqrt(2 n_layers)) so the stream's variance does not grow with
// depth, biases zero, norms one (weights) and zero (biases). MoE experts
// alike (their w2 is a residual projection), routers as Linears.
void Transformer::plan_init() {
  const ParamInit normal{ParamInit::Kind::kNormal, 0.02}, zeros{ParamInit::Kind::kZeros, 0},
      ones{ParamInit::Kind::kOnes, 0};
  const ParamInit residual{ParamInit::Kind::kNormal,
                           0.02 / std::sqrt(2.0 * double(config.n_layers))};
  for (auto& [name, m] : named_modules()) {
    const std::string at = name.empty() ? "" : name + ".";
    if (dynamic_cast<MoE*>(m)) {
      init_[at + "w1"] = init_[at + "w3"] = normal;
      init_[at + "w2"] = residual;
      init_[at + "b1"] = init_[at + "b2"] = init_[at + "b3"] = zeros;
    } else if (dynamic_cast<Linear*>(m)) {
      init_[at + "weight"] =
          name.ends_with("attn.wo") || name.ends_with("mlp.w2") ? residual : normal;
      init_[at + "bias"] = zeros;
    } else if (dynamic_cast<Embedding*>(m)) {
      init_[at + "weight"] = normal;
    } else if (dynamic_cast<LayerNorm*>(m) || dynamic_cast<RMSNorm*>(m)) {
      init_[at + "weight"] = ones;
      init_[at + "bias"] = zeros;
    }
  }
  for (const auto& [name, p] : named_parameters())
    SPMD_CHECK(init_.contains(name), "Transformer: no initialization for parameter ", name);
}

// Each parameter drawn whole: on the meta device this writes nothing, and
// the pieces a layout makes are filled later through init_parameter.
void Transformer::init_weights() {
  for (const auto& [name, p] : named_parameters())
    init_parameter(name, p, p.shape(), Shape(std::vector<int64_t>(size_t(p.ndim()), 0)));
}

void Transformer::init_parameter(const std::string& name, const Tensor& piece, const Shape& whole,
                                 const Shape& offset) const {
  const auto rule = init_.find(name);
  SPMD_CHECK(rule != init_.end(), "Transformer::init_parameter: the model has no parameter ", name);
  NoGradGuard no_grad;
  Tensor box = piece;
  switch (rule->second.kind) {
    case ParamInit::Kind::kNormal:
      ops::normal_box_(box, 0, rule->second.std, ops::init_key(seed_, name), whole, offset);
      break;
    case ParamInit::Kind::kZeros:
      ops::fill_(box, 0);
      break;
    case ParamInit::Kind::kOnes:
      ops::fill_(box, 1);
      break;
  }
}

Tensor Transformer::forward(const Tensor& ids) {
  SPMD_CHECK(ids.ndim() == 2 && !is_floating(ids.dtype()), "Transformer: expected integer ids ",
             "(B, T), got ", dtype_name(ids.dtype()), " ", ids.shape());
  const int64_t T = ids.size(1);
  SPMD_CHECK(T <= config.max_seq_len, "Transformer: sequence of ", T, " tokens exceeds ",
             "max_seq_len ", config.max_seq_len);
  Tensor x = (*tok_embeddings)(ids);  // (B, T, C)
  if (pos_embeddings) {
    x = add(x, (*pos_embeddings)(ops::arange(T, {DType::kI64, ids.device()})));  // + (T, C)
  }
  x = (*dropout)(x);
  x = (*layers)(x);
  x = (*norm)(x);
  if (output) return (*output)(x);
  return linear(x, tok_embeddings->weight);  // tied head: x E^T, (B, T, V)
}

}  // namespace spmd::nn
