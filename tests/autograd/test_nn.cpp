// Modules: names, parameter counts, state dicts through safetensors, hooks,
// train() and eval(), checkpoint wrappers; and the Transformer learning: initial loss
// near ln(vocab), one batch overfit to near zero.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/autocast.h"
#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "tensor/cuda_api.h"
#include "tensor/ops.h"
#include "tests/skip.h"

using namespace spmd;
using nn::Transformer;
using nn::TransformerConfig;

namespace {

std::vector<std::string> names_of(const nn::Module& m) {
  std::vector<std::string> out;
  for (auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

TransformerConfig tiny_gpt2() { return TransformerConfig::gpt2(32, 8, 2, 2, 16); }
TransformerConfig tiny_llama() { return TransformerConfig::llama(32, 8, 2, 4, 2, 16); }

Tensor random_ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator gen(seed);
  return ops::randint(0, V, {B, T}, {DType::kI64}, &gen);
}

}  // namespace

TEST_CASE("GPT-2 benchmark presets have the stated parameter counts", "[nn]") {
  CHECK(Transformer(TransformerConfig::preset("tiny")).num_parameters() == 842496);
  CHECK(Transformer(TransformerConfig::preset("small")).num_parameters() == 10844160);
  CHECK_THROWS_WITH(TransformerConfig::preset("huge"), Catch::Contains("tiny, small"));
}

TEST_CASE("parameters have PyTorch-style dotted names; a tied head is listed once", "[nn]") {
  Transformer gpt(tiny_gpt2());
  const std::vector<std::string> names = names_of(gpt);
  const std::vector<std::string> first = {
      "tok_embeddings.weight",   "pos_embeddings.weight",     "layers.0.attn_norm.weight",
      "layers.0.attn_norm.bias", "layers.0.attn.wqkv.weight", "layers.0.attn.wqkv.bias",
      "layers.0.attn.wo.weight", "layers.0.attn.wo.bias",     "layers.0.ffn_norm.weight",
      "layers.0.ffn_norm.bias",  "layers.0.mlp.w1.weight",    "layers.0.mlp.w1.bias",
      "layers.0.mlp.w2.weight",  "layers.0.mlp.w2.bias"};
  REQUIRE(names.size() == 2 + 12 * 2 + 2);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 14) == first);
  CHECK(names.back() == "norm.bias");

  Transformer llama(tiny_llama());
  const std::vector<std::string> lnames = names_of(llama);
  CHECK(std::find(lnames.begin(), lnames.end(), "layers.1.attn.wk.weight") != lnames.end());
  CHECK(std::find(lnames.begin(), lnames.end(), "layers.1.mlp.w3.weight") != lnames.end());
  CHECK(lnames.back() == "output.weight");
  CHECK(llama.parameter_slot("layers.1.attn.wk.weight").shape() ==
        Shape{8, 16});                       // 2 kv heads of 4
  CHECK(llama.named_buffers().size() == 4);  // RoPE tables, not saved
  CHECK(llama.state_dict().count("layers.0.attn.rope_cos") == 0);
  CHECK(&llama.submodule("layers.1.attn") == llama.layers->at(1)->children()[1].second.get());
}

TEST_CASE("state_dict round-trips through safetensors; mismatches are clear errors", "[nn]") {
  Transformer a(tiny_gpt2(), 1), b(tiny_gpt2(), 2);
  const std::string path = "/tmp/spmd_test_nn_state_" + std::to_string(::getpid()) + ".safetensors";
  a.save(path);
  b.load(path);
  std::remove(path.c_str());
  const Tensor ids = random_ids(2, 8, 32, 0);
  CHECK(ops::allclose(a(ids), b(ids), 0, 0));

  TensorMap state = a.state_dict();
  state.erase("norm.bias");
  state["extra"] = ops::zeros({1});
  CHECK_THROWS_WITH(b.load_state_dict(state),
                    Catch::Contains("missing keys: norm.bias") && Catch::Contains("extra"));
  b.load_state_dict(state, /*strict=*/false);
  state["norm.weight"] = ops::zeros({3});
  CHECK_THROWS_WITH(b.load_state_dict(state, false), Catch::Contains("norm.weight"));
}

TEST_CASE("forward hooks run around forward and may replace the output", "[nn][hooks]") {
  nn::Linear lin(3, 2);
  std::vector<std::string> order;
  const int pre = lin.register_forward_pre_hook(
      [&](nn::Module& m, Tensor&) { order.push_back("pre " + m.type_name()); });
  lin.register_forward_hook([&](nn::Module&, const Tensor&, Tensor& out) {
    order.push_back("post");
    out = ops::zeros_like(out);
  });
  const Tensor y = lin(ops::ones({4, 3}));
  CHECK(order == std::vector<std::string>{"pre Linear", "post"});
  CHECK(ops::to_vector<double>(ops::sum(ops::abs(y)))[0] == 0);
  lin.remove_hook(pre);
  lin(ops::ones({1, 3}));
  CHECK(order.size() == 3);
}

TEST_CASE("train/eval switch dropout; zero_grad drops gradients", "[nn]") {
  nn::Dropout drop(0.5);
  const Tensor x = ops::ones({1000});
  const double kept = ops::sum(ops::ne(drop(x), 0.0)).item<double>();
  CHECK(kept > 400);
  CHECK(kept < 600);
  drop.eval();
  CHECK(ops::allclose(drop(x), x));

  nn::Linear lin(3, 2);
  backward(sum(lin(ops::ones({1, 3}))));
  CHECK(lin.weight.grad().defined());
  lin.zero_grad(false);
  CHECK(ops::sum(ops::abs(lin.weight.grad())).item<double>() == 0);
  lin.zero_grad();
  CHECK_FALSE(lin.weight.grad().defined());
}

TEST_CASE("activation checkpointing keeps names, losses and gradients", "[nn][checkpoint]") {
  for (const TransformerConfig& config : {tiny_gpt2(), tiny_llama()}) {
    Transformer plain(config, 3), ckpt(config, 3);
    nn::apply_activation_checkpointing(*ckpt.layers);
    CHECK(names_of(plain) == names_of(ckpt));
    const Tensor ids = random_ids(2, 8, 32, 1), targets = random_ids(2, 8, 32, 2);
    const Tensor l1 = cross_entropy(plain(ids), targets), l2 = cross_entropy(ckpt(ids), targets);
    CHECK(l1.item<double>() == l2.item<double>());
    backward(l1);
    backward(l2);
    auto p1 = plain.named_parameters(), p2 = ckpt.named_parameters();
    for (size_t i = 0; i < p1.size(); ++i) {
      INFO(p1[i].first);
      CHECK(ops::allclose(p1[i].second.grad(), p2[i].second.grad(), 1e-5, 1e-7));
    }
  }
}

TEST_CASE("a fresh Transformer predicts near-uniformly: loss ~ ln(vocab)", "[nn][train]") {
  for (const TransformerConfig& config : {tiny_gpt2(), tiny_llama()}) {
    Transformer model(config, 5);
    const Tensor loss = cross_entropy(model(random_ids(4, 8, 32, 3)), random_ids(4, 8, 32, 4));
    CHECK(loss.item<double>() == Approx(std::log(32.0)).margin(0.05));
  }
}

TEST_CASE("one batch is overfit to near-zero loss (GPT-2 and Llama shapes)", "[nn][train]") {
  for (const TransformerConfig& config : {tiny_gpt2(), tiny_llama()}) {
    Transformer model(config, 6);
    optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
    // Inputs without repeated tokens: with RoPE alone (no absolute positions) a
    // run "a a" looks the same at both positions, and no model could give
    // them different targets.
    std::vector<int64_t> xs;
    for (int64_t i = 0; i < 16; ++i) xs.push_back((7 * i + 3) % 32);
    const Tensor x = ops::from_vector(xs, {2, 8}), y = random_ids(2, 8, 32, 8);
    double first = 0, last = 0;
    for (int step = 0; step < 150; ++step) {
      const Tensor loss = cross_entropy(model(x), y);
      if (step == 0) first = loss.item<double>();
      last = loss.item<double>();
      opt.zero_grad();
      backward(loss);
      opt.step();
    }
    INFO("first loss " << first << ", last " << last);
    CHECK(first > 3.0);
    CHECK(last < 0.05);
  }
}

TEST_CASE("autocast: bf16 products, f32 master weights and gradients", "[nn][autocast]") {
  nn::Linear lin(16, 8);
  const Tensor x = ops::randn({4, 16});
  const Tensor ref = lin(x);
  backward(sum(ref));
  const Tensor ref_grad = ops::clone(lin.weight.grad());
  lin.zero_grad();
  {
    AutocastGuard autocast(DType::kBF16, /*cpu=*/true);
    const Tensor y = lin(x);
    CHECK(y.dtype() == DType::kBF16);
    CHECK(ops::allclose(ops::to(y, DType::kF32), ref, 2e-2, 2e-2));
    backward(sum(y));
  }
  CHECK(lin.weight.dtype() == DType::kF32);
  CHECK(lin.weight.grad().dtype() == DType::kF32);
  CHECK(ops::allclose(lin.weight.grad(), ref_grad, 2e-2, 2e-2));
  CHECK(lin(x).dtype() == DType::kF32);  // off again outside the guard
  {
    AutocastGuard autocast;  // CUDA only by default: CPU tensors stay f32
    CHECK(lin(x).dtype() == DType::kF32);
  }

  Transformer model(tiny_gpt2(), 9);
  const Tensor ids = random_ids(2, 8, 32, 10), targets = random_ids(2, 8, 32, 11);
  const double full = cross_entropy(model(ids), targets).item<double>();
  AutocastGuard autocast(DType::kBF16, true);
  const Tensor loss = cross_entropy(model(ids), targets);
  CHECK(loss.dtype() == DType::kF32);  // cross-entropy runs in f32
  CHECK(loss.item<double>() == Approx(full).epsilon(1e-2));
}

TEST_CASE("autocast: f32 weight gradients unrounded, cached copies, checkpoint recompute",
          "[nn][autocast]") {
  nn::Linear lin(16, 8);
  const Tensor x = ops::randn({4, 16});
  const Tensor x16 = ops::to(ops::to(x, DType::kBF16), DType::kF32);  // what the product sees
  {
    AutocastGuard autocast(DType::kBF16, /*cpu=*/true);
    backward(sum(lin(x)));
  }
  // d(sum y)/dW = ones^T x: the column sums of the bf16 inputs, in f32 and not
  // rounded to bf16 (which would be off by ~1e-3 relative).
  const Tensor expected = ops::expand(ops::sum(x16, {0}, true), {8, 16});
  CHECK(ops::allclose(lin.weight.grad(), expected, 1e-6, 1e-6));

  // One copy per parameter and version inside a guard; none outside.
  CHECK(autograd::autocast_operand(lin.weight).is_same(lin.weight));
  {
    AutocastGuard autocast(DType::kBF16, true);
    const Tensor first = autograd::autocast_operand(lin.weight);
    CHECK(first.dtype() == DType::kBF16);
    CHECK(autograd::autocast_operand(lin.weight).is_same(first));
    {
      NoGradGuard no_grad;
      ops::add_(lin.weight, 1.0);  // as an optimizer step would: a new version
    }
    const Tensor second = autograd::autocast_operand(lin.weight);
    CHECK(!second.is_same(first));
    CHECK(ops::allclose(ops::to(second, DType::kF32), ops::to(ops::add(first, 1.0), DType::kF32),
                        1e-2, 1e-2));
  }

  // A checkpointed forward is recomputed under the forward's autocast, even
  // when backward runs outside the guard: the gradients match exactly.
  auto grads_of = [&](bool use_checkpoint) {
    lin.zero_grad();
    Tensor xi = ops::clone(x);
    xi.requires_grad_();
    Tensor y;
    {
      AutocastGuard autocast(DType::kBF16, true);
      auto fn = [&](const Tensor& t) { return lin(t); };
      y = use_checkpoint ? autograd::checkpoint(fn, xi) : fn(xi);
    }
    backward(sum(y));
    return ops::clone(lin.weight.grad());
  };
  CHECK(ops::allclose(grads_of(true), grads_of(false), 0, 0));
}

TEST_CASE("[gpu] a training step on CUDA matches the CPU; autocast bf16 stays close", "[gpu][nn]") {
  if (!cuda::is_available()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  const TransformerConfig config = TransformerConfig::preset("tiny");
  Transformer cpu_model(config, 12), gpu_model(config, 12);
  gpu_model.to(Device::cuda(0));
  const Tensor x = random_ids(4, 128, 256, 13), y = random_ids(4, 128, 256, 14);
  const Tensor cpu_loss = cross_entropy(cpu_model(x), y);
  const Tensor gpu_loss =
      cross_entropy(gpu_model(ops::to(x, Device::cuda(0))), ops::to(y, Device::cuda(0)));
  CHECK(gpu_loss.item<double>() == Approx(cpu_loss.item<double>()).epsilon(1e-4));
  backward(cpu_loss);
  backward(gpu_loss);
  auto pc = cpu_model.named_parameters(), pg = gpu_model.named_parameters();
  for (size_t i = 0; i < pc.size(); ++i) {
    INFO(pc[i].first);
    CHECK(pg[i].second.grad().is_cuda());
    CHECK(ops::allclose(ops::to(pg[i].second.grad(), Device::cpu()), pc[i].second.grad(), 1e-3,
                        1e-5));
  }
  AutocastGuard autocast;  // bf16 on CUDA
  const Tensor bf16_loss =
      cross_entropy(gpu_model(ops::to(x, Device::cuda(0))), ops::to(y, Device::cuda(0)));
  CHECK(bf16_loss.item<double>() == Approx(cpu_loss.item<double>()).epsilon(2e-2));
}
