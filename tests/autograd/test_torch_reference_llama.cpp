// spmd against PyTorch on one training step of the Llama shape (RMSNorm,
// RoPE, SwiGLU, grouped-query attention) and of mixture-of-experts blocks
// (top-k routing, expert capacity, Switch's balancing loss), as
// test_torch_reference does for GPT-2: spmd builds the model, runs a batch
// forward and backward of the trainer's objective and one AdamW step, and
// writes its weights, the batch and every result to safetensors files;
// torch_reference_llama.py (Debian's python3-torch) rebuilds the model from
// those weights with torch_llama.py, written from the papers' definitions,
// and checks the cross-entropy, the objective, the logits, each MoE block's
// balancing loss and expert counts, and every gradient to 1e-4 relative; and
// every parameter after the step against torch's AdamW from the same weights
// and spmd's gradients (the docstring of torch_reference_llama.py says why).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <string>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "tensor/ops.h"
#include "tests/run_command.h"

using namespace spmd;

namespace {

// Runs a shell command (tests/run_command.h).
std::pair<int, std::string> run(const std::string& command) { return test::run_command(command); }

// One training step of `config` on a (B, 16) batch, checked against PyTorch.
// The objective is the trainer's (Parallelized::forward in
// train/train_step.cpp): the cross-entropy, plus aux_coef x the sum of every
// MoE block's balancing loss when the model has experts.
void check_step(const nn::TransformerConfig& config, int64_t B, double aux_coef = 0) {
  const char* root = std::getenv("SPMD_SOURCE_DIR");
  REQUIRE(root != nullptr);
  static int calls = 0;  // a folder of its own for each case (SPMD_KEEP=1 keeps them)
  const std::string dir =
      "/tmp/spmd_torch_ref_llama_" + std::to_string(::getpid()) + "_" + std::to_string(calls++);
  REQUIRE(::mkdir(dir.c_str(), 0700) == 0);

  const optim::AdamWOptions adamw{.lr = 1e-3, .weight_decay = 0.1};
  nn::Transformer model(config, 42);
  model.save(dir + "/model.safetensors");
  Generator gen(1);
  const int64_t T = 16;
  const Tensor x = ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen);
  const Tensor y = ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen);
  save_safetensors(dir + "/batch.safetensors", {{"x", x}, {"y", y}});

  TensorMap results;
  const Tensor logits = model(x);
  const Tensor ce = cross_entropy(logits, y);
  const auto moes = nn::moe_layers(model);
  const Tensor loss = moes.empty() ? ce : add(ce, mul(nn::moe_aux_loss(model), aux_coef));
  backward(loss);
  results["ce"] = ce;
  results["loss"] = loss;
  results["logits"] = logits;
  for (const auto& [name, moe] : moes) {
    results["aux." + name] = moe->aux_loss();
    const std::vector<int64_t>& counts = moe->stats().tokens_per_expert;
    results["counts." + name] = ops::from_vector(counts, Shape{int64_t(counts.size())});
  }
  for (auto& [name, p] : model.named_parameters()) results["grad." + name] = ops::clone(p.grad());
  optim::AdamW(model.parameters(), adamw).step();
  for (auto& [name, p] : model.named_parameters()) results["step." + name] = p;
  save_safetensors(dir + "/spmd.safetensors", results);

  using C = nn::TransformerConfig;
  const auto flag = [](bool b) { return b ? "true" : "false"; };
  std::ofstream json(dir + "/config.json");
  json << std::setprecision(17) << "{\"vocab_size\": " << config.vocab_size
       << ", \"max_seq_len\": " << config.max_seq_len << ", \"n_layers\": " << config.n_layers
       << ", \"n_heads\": " << config.n_heads
       << ", \"n_kv_heads\": " << (config.n_kv_heads > 0 ? config.n_kv_heads : config.n_heads)
       << ", \"d_model\": " << config.d_model << ", \"hidden\": " << config.hidden_dim()
       << ", \"norm\": \"" << (config.norm == C::Norm::kRMSNorm ? "rms" : "layer")
       << "\", \"activation\": \""
       << (config.activation == C::Activation::kSwiGLU ? "swiglu" : "gelu")
       << "\", \"positions\": \"" << (config.positions == C::Positions::kRope ? "rope" : "learned")
       << "\", \"bias\": " << flag(config.bias) << ", \"fused_qkv\": " << flag(config.fused_qkv)
       << ", \"tie_embeddings\": " << flag(config.tie_embeddings)
       << ", \"norm_eps\": " << config.norm_eps << ", \"rope_theta\": " << config.rope_theta
       << ", \"n_experts\": " << config.n_experts << ", \"moe_top_k\": " << config.moe_top_k
       << ", \"moe_every\": " << config.moe_every
       << ", \"moe_capacity_factor\": " << config.moe_capacity_factor
       << ", \"moe_aux_coef\": " << aux_coef << ", \"lr\": " << adamw.lr
       << ", \"beta1\": " << adamw.beta1 << ", \"beta2\": " << adamw.beta2
       << ", \"eps\": " << adamw.eps << ", \"weight_decay\": " << adamw.weight_decay << "}\n";
  json.close();

  const auto [status, output] = run("/usr/bin/python3 " + std::string(root) +
                                    "/tests/autograd/torch_reference_llama.py " + dir);
  if (!std::getenv("SPMD_KEEP")) run("rm -rf " + dir);
  INFO(output);
  CHECK(status == 0);
  CHECK_THAT(output, Catch::Contains("tensors within"));
  // The routing lines (each MoE block's expert counts) and the summary.
  size_t at = 0;
  while (at < output.size()) {
    const size_t end = std::min(output.find('\n', at), output.size());
    const std::string line = output.substr(at, end - at);
    if (line.find("counts.") != std::string::npos ||
        line.find("tensors within") != std::string::npos)
      std::printf("%s\n", line.c_str());
    at = end + 1;
  }
}

}  // namespace

TEST_CASE("a Llama training step matches PyTorch: GQA 4 heads over 2, RoPE, RMSNorm, SwiGLU",
          "[torch]") {
  // max_seq_len 32 > T: the RoPE tables' first 16 rows are the ones used.
  check_step(nn::TransformerConfig::llama(64, 32, 2, 4, 2, 32), 3);
}

TEST_CASE("a Llama training step matches PyTorch: 8 heads over 1 (MQA), theta 5e5, hidden 96",
          "[torch]") {
  nn::TransformerConfig c = nn::TransformerConfig::llama(96, 16, 2, 8, 1, 64);
  c.rope_theta = 500000.0;  // Llama 3's
  c.ffn_hidden = 96;
  check_step(c, 2);
}

TEST_CASE("an MoE training step matches PyTorch: top-2 of 4 experts in every block, no capacity",
          "[torch]") {
  nn::TransformerConfig c = nn::TransformerConfig::llama(64, 16, 2, 4, 2, 32);
  c.n_experts = 4;
  c.moe_top_k = 2;
  c.moe_every = 1;
  check_step(c, 3, /*aux_coef=*/0.1);
}

TEST_CASE("an MoE training step matches PyTorch: top-1 of 4 in every other block, capacity 1.1",
          "[torch]") {
  nn::TransformerConfig c = nn::TransformerConfig::llama(64, 16, 2, 4, 4, 48);
  c.n_experts = 4;
  c.moe_top_k = 1;
  c.moe_every = 2;              // block 0 MoE, block 1 dense
  c.moe_capacity_factor = 1.1;  // ceil(1.1 * 48 / 4) = 14 tokens per expert
  check_step(c, 3, /*aux_coef=*/0.01);
}

TEST_CASE(
    "an MoE training step matches PyTorch: GPT-2 shape, top-2 GELU experts with biases, "
    "capacity 0.9",
    "[torch]") {
  nn::TransformerConfig c = nn::TransformerConfig::gpt2(64, 16, 2, 2, 32);
  c.n_experts = 4;
  c.moe_top_k = 2;
  c.moe_capacity_factor = 0.9;  // ceil(0.9 * 64 / 4) = 15 assignments per expert
  check_step(c, 2, /*aux_coef=*/0.1);
}
