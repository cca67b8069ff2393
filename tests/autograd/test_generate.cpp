// Generation (autograd/nn/generate.h): the key/value cache against full
// forwards over the same prefix, greedy decoding against repeated argmaxes,
// the sampler's draws against the probabilities it was given, and the
// refusals of bad prompts.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/generate.h"
#include "tensor/cuda_api.h"
#include "tensor/ops.h"
#include "tests/skip.h"

using namespace spmd;
using nn::Transformer;
using nn::TransformerConfig;

namespace {

// The full forward's logits after the last token of `prefix`: (V) f32.
std::vector<float> full_forward_last(Transformer& model, const std::vector<int64_t>& prefix) {
  NoGradGuard no_grad;
  const int64_t T = int64_t(prefix.size()), V = model.config.vocab_size;
  const Device device = model.tok_embeddings->weight.device();
  const Tensor logits = model(ops::from_vector(prefix, Shape{1, T}, device));
  const Tensor last = ops::contiguous(ops::to(ops::narrow(logits, 1, T - 1, 1), Device::cpu()));
  return std::vector<float>(last.data<float>(), last.data<float>() + V);
}

void check_close(const float* got, const std::vector<float>& want) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  INFO("largest difference " << worst << " against logits up to " << scale);
  CHECK(worst <= 1e-5 * std::max(1.0, scale));
}

int64_t argmax(const std::vector<float>& v) {
  return int64_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// Two prompts of different lengths in one cache; at every step each row's
// logits equal a full forward over that row's whole sequence so far.
void check_cache_against_full_forward(const TransformerConfig& config) {
  Transformer model(config, 21);
  model.eval();
  const std::vector<std::vector<int64_t>> prompts{{3, 1, 4, 1, 5}, {9, 2}};
  nn::KVCacheDecoder cache(model, 2, config.max_seq_len);
  std::vector<std::vector<int64_t>> seq = prompts;
  std::vector<int64_t> next(2);
  for (int64_t b = 0; b < 2; ++b) {
    const Tensor logits = cache.prefill(b, prompts[size_t(b)]);
    const std::vector<float> want = full_forward_last(model, seq[size_t(b)]);
    check_close(logits.data<float>(), want);
    next[size_t(b)] = argmax(want);
  }
  const int64_t steps = config.max_seq_len - 5;  // the longer prompt fills the cache
  for (int64_t s = 0; s < steps; ++s) {
    INFO("step " << s);
    const Tensor logits = cache.step({0, 1}, next);
    for (int64_t b = 0; b < 2; ++b) {
      seq[size_t(b)].push_back(next[size_t(b)]);
      const std::vector<float> want = full_forward_last(model, seq[size_t(b)]);
      check_close(logits.data<float>() + b * config.vocab_size, want);
      next[size_t(b)] = argmax(want);
    }
  }
  CHECK(cache.length(0) == config.max_seq_len);
  CHECK_THROWS_WITH(cache.step({0}, {1}), Catch::Contains("cache is full"));
}

}  // namespace

TEST_CASE("the KV cache's logits equal a full forward's at every step (GPT-2 shape)",
          "[generate]") {
  check_cache_against_full_forward(TransformerConfig::gpt2(40, 12, 2, 2, 16));
}

TEST_CASE("the KV cache's logits equal a full forward's at every step (Llama: RoPE, GQA)",
          "[generate]") {
  check_cache_against_full_forward(TransformerConfig::llama(40, 12, 2, 4, 2, 16));
}

TEST_CASE("greedy generation is the argmax of repeated full forwards", "[generate]") {
  const TransformerConfig config = TransformerConfig::gpt2(50, 24, 2, 2, 32);
  Transformer model(config, 5);
  const std::vector<std::vector<int64_t>> prompts{{7, 8, 9}, {1}, {4, 4, 4, 4, 4, 4}};
  const nn::GenerateResult r = nn::generate(model, prompts, 12, {});
  REQUIRE(r.tokens.size() == 3);
  for (size_t b = 0; b < prompts.size(); ++b) {
    std::vector<int64_t> seq = prompts[b];
    for (const int64_t t : r.tokens[b]) {
      CHECK(t == argmax(full_forward_last(model, seq)));
      seq.push_back(t);
    }
    CHECK(r.tokens[b].size() == 12);
  }
  CHECK(r.prefill_tokens == 10);
  CHECK(r.decode_tokens == 3 * 11);  // the first new token comes from the prefill
  CHECK(model.is_training());        // put back as it was
}

TEST_CASE("a stop token ends its sequence alone; the rest go on", "[generate]") {
  const TransformerConfig config = TransformerConfig::gpt2(50, 24, 2, 2, 32);
  Transformer model(config, 5);
  const std::vector<std::vector<int64_t>> prompts{{7, 8, 9}, {1}};
  const nn::GenerateResult free = nn::generate(model, prompts, 10, {});
  const int64_t stop = free.tokens[0][2];  // the third token of the first
  const nn::GenerateResult r = nn::generate(model, prompts, 10, {}, stop);
  const auto at = std::find(free.tokens[0].begin(), free.tokens[0].end(), stop);
  CHECK(r.tokens[0] == std::vector<int64_t>(free.tokens[0].begin(), at + 1));
  const auto at1 = std::find(free.tokens[1].begin(), free.tokens[1].end(), stop);
  CHECK(r.tokens[1] ==
        std::vector<int64_t>(free.tokens[1].begin(), at1 == free.tokens[1].end() ? at1 : at1 + 1));
}

TEST_CASE("sampling: the same seed gives the same tokens, another seed others", "[generate]") {
  const TransformerConfig config = TransformerConfig::gpt2(50, 40, 2, 2, 32);
  Transformer model(config, 6);
  const std::vector<std::vector<int64_t>> prompts{{1, 2}, {3}};
  nn::SamplingOptions o;
  o.temperature = 1.5, o.top_k = 20, o.top_p = 0.95, o.seed = 11;
  const auto a = nn::generate(model, prompts, 30, o).tokens;
  const auto b = nn::generate(model, prompts, 30, o).tokens;
  CHECK(a == b);
  o.seed = 12;
  CHECK(nn::generate(model, prompts, 30, o).tokens != a);
}

TEST_CASE("the sampler draws in proportion to softmax(logits / T) over top-k and top-p",
          "[generate]") {
  // probabilities at T = 1: 0.5, 0.25, 0.125, 0.0625, 0.0625
  const std::vector<float> logits{float(std::log(8.0)), float(std::log(4.0)), float(std::log(2.0)),
                                  0.f, 0.f};
  const auto frequencies = [&](nn::SamplingOptions o) {
    nn::Sampler s(o, 0);
    std::vector<double> f(logits.size(), 0);
    const int n = 40000;
    for (int i = 0; i < n; ++i) f[size_t(s.next(logits.data(), 5))] += 1.0 / n;
    return f;
  };
  nn::SamplingOptions o;
  o.temperature = 1, o.seed = 3;
  std::vector<double> f = frequencies(o);
  const std::vector<double> p{0.5, 0.25, 0.125, 0.0625, 0.0625};
  for (size_t i = 0; i < p.size(); ++i) CHECK(f[i] == Approx(p[i]).margin(0.01));
  o.top_k = 2;  // 2/3 and 1/3
  f = frequencies(o);
  CHECK(f[0] == Approx(2.0 / 3).margin(0.01));
  CHECK(f[1] == Approx(1.0 / 3).margin(0.01));
  CHECK(f[2] + f[3] + f[4] == 0);
  o.top_k = 0, o.top_p = 0.8;  // 0.5 + 0.25 < 0.8 <= 0.875: three tokens, 4/7 2/7 1/7
  f = frequencies(o);
  CHECK(f[0] == Approx(4.0 / 7).margin(0.01));
  CHECK(f[2] == Approx(1.0 / 7).margin(0.01));
  CHECK(f[3] + f[4] == 0);
  o.top_p = 1, o.temperature = 2;  // softmax(log p / 2) ~ sqrt(p)
  f = frequencies(o);
  double z = 0;
  for (double q : p) z += std::sqrt(q);
  CHECK(f[0] == Approx(std::sqrt(0.5) / z).margin(0.01));
  o.temperature = 0;  // greedy
  CHECK(frequencies(o)[0] == Approx(1));
}

TEST_CASE("bad prompts and options are refused, naming the limit", "[generate]") {
  const TransformerConfig config = TransformerConfig::gpt2(50, 16, 1, 2, 16);
  Transformer model(config, 1);
  CHECK_THROWS_WITH(nn::generate(model, {{1, 2}, {}}, 4, {}), Catch::Contains("prompt 2 is empty"));
  CHECK_THROWS_WITH(nn::generate(model, {std::vector<int64_t>(14, 1)}, 4, {}),
                    Catch::Contains("prompt 1 has 14 tokens; with 4 new tokens it needs 18 "
                                    "positions, more than the model's max_seq_len 16"));
  CHECK_THROWS_WITH(nn::generate(model, {{1, 50}}, 4, {}),
                    Catch::Contains("holds token 50, outside the vocabulary [0, 50)"));
  CHECK_THROWS_WITH(nn::generate(model, {{1}}, 0, {}), Catch::Contains("max_new_tokens"));
  nn::SamplingOptions o;
  o.temperature = -1;
  CHECK_THROWS_WITH(nn::generate(model, {{1}}, 4, o), Catch::Contains("temperature must be >= 0"));
  o.temperature = 1, o.top_p = 0;
  CHECK_THROWS_WITH(nn::generate(model, {{1}}, 4, o), Catch::Contains("top_p must lie in (0, 1]"));
}

TEST_CASE("[gpu] generation on CUDA picks the CPU's greedy tokens", "[gpu][generate]") {
  if (!cuda::is_available()) SPMD_SKIP_WITHOUT_GPU("no GPU: skipping");
  const TransformerConfig config = TransformerConfig::gpt2(64, 32, 2, 2, 32);
  Transformer cpu_model(config, 9), gpu_model(config, 9);
  gpu_model.to(Device::cuda(0));
  const std::vector<std::vector<int64_t>> prompts{{5, 6, 7}, {8}};
  const auto cpu = nn::generate(cpu_model, prompts, 16, {});
  const auto gpu = nn::generate(gpu_model, prompts, 16, {});
  // Argmaxes may part where two logits tie within rounding; the first
  // tokens cannot have drifted yet.
  for (size_t b = 0; b < prompts.size(); ++b)
    CHECK(std::vector<int64_t>(gpu.tokens[b].begin(), gpu.tokens[b].begin() + 4) ==
          std::vector<int64_t>(cpu.tokens[b].begin(), cpu.tokens[b].begin() + 4));
  // And the cache's logits equal the GPU's own full forward.
  nn::KVCacheDecoder cache(gpu_model, 1, 32);
  const Tensor logits = cache.prefill(0, {5, 6, 7});
  check_close(logits.data<float>(), full_forward_last(gpu_model, {5, 6, 7}));
}

TEST_CASE("new tokens come from the tokenizer's ids, below a padded vocabulary's", "[generate]") {
  const TransformerConfig config = TransformerConfig::gpt2(64, 24, 1, 2, 16);
  Transformer model(config, 4);
  {  // the padding's logits made the largest: its head rows (tied: the embeddings) scaled up
    NoGradGuard no_grad;
    const Tensor pad = ops::narrow(model.tok_embeddings->weight, 0, 50, 14);
    ops::copy_(pad, ops::mul(pad, 1000.0));
  }
  const std::vector<std::vector<int64_t>> prompts{{1, 2, 3}};
  const auto unlimited = nn::generate(model, prompts, 12, {});
  CHECK(std::any_of(unlimited.tokens[0].begin(), unlimited.tokens[0].end(),
                    [](int64_t t) { return t >= 50; }));  // the test can fail
  nn::SamplingOptions o;
  o.temperature = 1, o.seed = 2;
  for (const nn::SamplingOptions& opts : {nn::SamplingOptions{}, o}) {
    const auto limited = nn::generate(model, prompts, 12, opts, -1, 50);
    for (const int64_t t : limited.tokens[0]) CHECK(t < 50);
  }
  CHECK_THROWS_WITH(nn::generate(model, prompts, 4, {}, -1, 65),
                    Catch::Contains("vocab_limit 65 must lie in [0, 64]"));
}
