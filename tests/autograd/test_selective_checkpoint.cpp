// Selective activation checkpointing (autograd/selective_checkpoint.h) and
// checkpointing every k-th block, against no checkpointing: the same loss
// and gradients (1e-6 of each tensor's largest magnitude), dropout's masks
// included; the bytes a forward leaves for backward equal the lists of
// autograd/nn/block_memory.h under each mode; and the ops that run again in
// backward, counted by the profiler, are the ones each mode says.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/checkpoint.h"
#include "autograd/nn/block_memory.h"
#include "autograd/nn/checkpoint_wrapper.h"
#include "autograd/nn/transformer.h"
#include "runtime/profiler.h"
#include "tensor/cpu/allocator.h"
#include "tensor/ops.h"

using namespace spmd;
using autograd::CheckpointPolicy;
using nn::BlockCheckpointing;
using nn::CheckpointOptions;
using nn::Transformer;
using nn::TransformerConfig;

namespace {

// B 2, T 16, C 32, 4 heads, MLP 128: every tensor's bytes a multiple of the
// allocator's rounding, so its counts are exact.
TransformerConfig small_gpt2(double dropout) {
  TransformerConfig c = TransformerConfig::gpt2(64, 16, 4, 4, 32);
  c.dropout = dropout;
  return c;
}
TransformerConfig small_llama(double dropout) {
  TransformerConfig c = TransformerConfig::llama(64, 16, 4, 4, 2, 32);  // GQA: 2 kv heads
  c.dropout = dropout;
  return c;
}
constexpr int64_t kB = 2, kT = 16;

Tensor random_ids(uint64_t seed, int64_t B) {
  Generator gen(seed);
  return ops::randint(0, 64, {B, kT}, {DType::kI64}, &gen);
}

// One forward and backward from the same generator state (dropout's masks); the loss.
double loss_and_grads(Transformer& model, int64_t B = kB) {
  manual_seed(11);
  const Tensor loss = cross_entropy(model(random_ids(1, B)), random_ids(2, B));
  backward(loss);
  return loss.item<double>();
}

void expect_same_gradients(Transformer& plain, Transformer& ckpt) {
  const auto a = plain.named_parameters(), b = ckpt.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].first);
    const double scale = ops::amax(ops::abs(a[i].second.grad())).item<double>();
    const double diff =
        ops::amax(ops::abs(ops::sub(a[i].second.grad(), b[i].second.grad()))).item<double>();
    CHECK(diff <= 1e-6 * scale);
  }
}

// Bytes that a forward through model.layers leaves alive for backward.
size_t bytes_kept_by_layers(Transformer& model) {
  Generator gen(5);
  Tensor x = ops::randn({kB, kT, model.config.d_model}, {}, &gen);
  x.requires_grad_();
  manual_seed(11);
  const size_t before = cpu::host_memory_stats().allocated;
  const Tensor y = (*model.layers)(x);
  return cpu::host_memory_stats().allocated - before;
}

// The profiler's count of `op` in the backward phase of one step.
int64_t backward_calls(const std::vector<profiler::OpStats>& rows, const std::string& op) {
  for (const profiler::OpStats& r : rows)
    if (r.name == op && r.phase == ProfilePhase::kBackward) return r.calls;
  return 0;
}

std::vector<profiler::OpStats> profile_step(Transformer& model) {
  profiler::reset();
  profiler::start();
  loss_and_grads(model);
  profiler::stop();
  return profiler::key_averages();
}

}  // namespace

TEST_CASE("selective checkpointing gives the gradients of no checkpointing",
          "[checkpoint][selective]") {
  const std::vector<std::pair<std::string, CheckpointOptions>> modes = {
      {"selective op", {.policy = CheckpointPolicy::kSaveProducts}},
      {"full every 2nd block", {.every = 2}},
      {"selective op every 3rd block", {.policy = CheckpointPolicy::kSaveProducts, .every = 3}},
  };
  for (const double p : {0.0, 0.2}) {
    for (const TransformerConfig& config : {small_gpt2(p), small_llama(p)}) {
      for (const auto& [name, options] : modes) {
        INFO(name << ", dropout " << p << ", " << (config.fused_qkv ? "GPT-2" : "Llama"));
        Transformer plain(config, 3), ckpt(config, 3);
        nn::apply_activation_checkpointing(*ckpt.layers, options);
        const double l1 = loss_and_grads(plain), l2 = loss_and_grads(ckpt);
        CHECK(l1 == l2);  // the same forward, op for op
        expect_same_gradients(plain, ckpt);
      }
    }
  }
}

TEST_CASE("every = k wraps blocks k-1, 2k-1, ... as TorchTitan counts them",
          "[checkpoint][selective]") {
  Transformer model(small_gpt2(0), 3);
  nn::apply_activation_checkpointing(*model.layers, {.every = 2});
  std::vector<bool> wrapped;
  for (size_t i = 0; i < model.layers->size(); ++i)
    wrapped.push_back(dynamic_cast<nn::CheckpointWrapper*>(model.layers->at(i).get()) != nullptr);
  CHECK(wrapped == std::vector<bool>{false, true, false, true});
  CHECK_THROWS_WITH(nn::apply_activation_checkpointing(*model.layers, {.every = 0}),
                    "apply_activation_checkpointing: every must be at least 1, got 0");
}

TEST_CASE("a forward keeps for backward what block_memory.h lists, per mode",
          "[checkpoint][selective][memory]") {
  for (const double p : {0.0, 0.2}) {
    for (const TransformerConfig& config : {small_gpt2(p), small_llama(p)}) {
      INFO((config.fused_qkv ? "GPT-2" : "Llama") << ", dropout " << p);
      const int64_t L = config.n_layers, tokens = kB * kT;
      auto expected = [&](BlockCheckpointing mode) {
        return size_t(L * tokens * nn::kept_per_token(config, mode) * 4);
      };
      Transformer none(config, 3), full(config, 3), selective(config, 3), every2(config, 3);
      nn::apply_activation_checkpointing(*full.layers);
      nn::apply_activation_checkpointing(*selective.layers,
                                         {.policy = CheckpointPolicy::kSaveProducts});
      nn::apply_activation_checkpointing(*every2.layers, {.every = 2});
      const size_t kept_none = bytes_kept_by_layers(none);
      const size_t kept_selective = bytes_kept_by_layers(selective);
      const size_t kept_full = bytes_kept_by_layers(full);
      CHECK(kept_none == expected(BlockCheckpointing::kNone));
      CHECK(kept_selective == expected(BlockCheckpointing::kSelective));
      CHECK(kept_full == expected(BlockCheckpointing::kFull));
      CHECK(bytes_kept_by_layers(every2) == (kept_none + kept_full) / 2);
      CHECK(kept_full < kept_selective);
      CHECK(kept_selective < kept_none);
    }
  }
  // By hand for GPT-2 without dropout (C 32, H 4, F 128): 8 C + 2 F + H + 4
  // norm statistics (9 C off the CPU); 7 C + F + H; C.
  const TransformerConfig c = small_gpt2(0);
  CHECK(nn::kept_per_token(c, BlockCheckpointing::kNone) == 8 * 32 + 2 * 128 + 4 + 4);
  CHECK(nn::kept_per_token(c, BlockCheckpointing::kNone, Device::cuda()) ==
        9 * 32 + 2 * 128 + 4 + 4);
  CHECK(nn::kept_per_token(c, BlockCheckpointing::kSelective) == 7 * 32 + 128 + 4);
  CHECK(nn::kept_per_token(c, BlockCheckpointing::kFull) == 32);
}

TEST_CASE("the allocator's peak over a step: full < selective < none",
          "[checkpoint][selective][memory]") {
  // A batch of 16 x 16 tokens, so that the activations outweigh the
  // gradients (the peak of a small batch is at the end of backward, when
  // every gradient is in and every activation gone, whatever the mode).
  auto peak = [](const CheckpointOptions* options) {
    Transformer model(small_llama(0.1), 3);
    if (options) nn::apply_activation_checkpointing(*model.layers, *options);
    const size_t base = cpu::host_memory_stats().allocated;
    cpu::reset_host_peak_memory();
    loss_and_grads(model, 16);
    return cpu::host_memory_stats().peak_allocated - base;
  };
  const CheckpointOptions full, selective{.policy = CheckpointPolicy::kSaveProducts};
  const size_t none_peak = peak(nullptr), selective_peak = peak(&selective);
  const size_t full_peak = peak(&full);
  INFO("peaks: none " << none_peak << ", selective " << selective_peak << ", full " << full_peak);
  CHECK(full_peak < selective_peak);
  CHECK(selective_peak < none_peak);
}

TEST_CASE("backward reruns every op under full, no product under selective",
          "[checkpoint][selective][profiler]") {
  // GPT-2 with dropout: per block 4 linears (wqkv, wo, w1, w2), one
  // attention, two LayerNorms, two dropouts.
  const TransformerConfig config = small_gpt2(0.1);
  const int64_t L = config.n_layers;
  Transformer none(config, 3), full(config, 3), selective(config, 3);
  nn::apply_activation_checkpointing(*full.layers);
  nn::apply_activation_checkpointing(*selective.layers,
                                     {.policy = CheckpointPolicy::kSaveProducts});
  const auto n = profile_step(none), f = profile_step(full), s = profile_step(selective);
  for (const char* op : {"attention", "layer_norm", "random_uniform"}) {
    INFO(op);
    CHECK(backward_calls(n, op) == 0);  // forward kernels: none runs in backward
  }
  CHECK(backward_calls(f, "matmul") == backward_calls(n, "matmul") + 4 * L);
  CHECK(backward_calls(f, "attention") == L);
  CHECK(backward_calls(f, "layer_norm") == 2 * L);
  CHECK(backward_calls(f, "random_uniform") == 2 * L);
  // Selective: the products come from the forward; the cheap ops run again.
  CHECK(backward_calls(s, "matmul") == backward_calls(n, "matmul"));
  CHECK(backward_calls(s, "attention") == 0);
  CHECK(backward_calls(s, "layer_norm") == 2 * L);
  CHECK(backward_calls(s, "random_uniform") == 2 * L);
}

TEST_CASE("a recomputation that runs other products than the forward is a clear error",
          "[checkpoint][selective]") {
  Generator gen(1);
  Tensor w = ops::randn({4, 4}, {}, &gen), x = ops::randn({2, 4}, {}, &gen);
  w.requires_grad_();
  x.requires_grad_();
  int calls = 0;
  auto fn = [&](const Tensor& h) {  // a product in forward, none in the recomputation
    return ++calls == 1 ? tanh(matmul(h, w)) : tanh(mul(h, 2.0));
  };
  const Tensor y = autograd::checkpoint(fn, x, CheckpointPolicy::kSaveProducts);
  CHECK_THROWS_WITH(backward(sum(y)),
                    "in the backward of checkpoint: selective checkpoint: the recomputation ran 0 "
                    "of the 1 listed ops the "
                    "forward ran; the first left out is matmul");
}
