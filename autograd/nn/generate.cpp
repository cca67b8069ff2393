// Generation with a key/value cache: prefill, then one token per step.
#include "autograd/nn/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "autograd/grad_mode.h"
#include "autograd/nn_functional.h"
#include "autograd/tensor_ops.h"
#include "tensor/ops.h"

namespace spmd::nn {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// logits (R, T, V) on the model's device -> the last position's, (R, V) f32 on the CPU.
Tensor last_logits(const Tensor& logits) {
  const Tensor last = ops::narrow(logits, 1, logits.size(1) - 1, 1);
  return ops::contiguous(ops::to(
      ops::to(ops::reshape(last, {logits.size(0), logits.size(2)}), DType::kF32), Device::cpu()));
}

}  // namespace

// --- The cache ---------------------------------------------------------------------------

KVCacheDecoder::KVCacheDecoder(Transformer& model, int64_t batch, int64_t capacity)
    : model_(model), capacity_(capacity), length_(size_t(batch), 0) {
  SPMD_CHECK(batch > 0 && capacity > 0 && capacity <= model.config.max_seq_len,
             "KVCacheDecoder: batch ", batch, " and capacity ", capacity,
             " must be positive, the capacity at most max_seq_len ", model.config.max_seq_len);
  const Tensor& w = model.tok_embeddings->weight;
  for (size_t l = 0; l < model.layers->size(); ++l) {
    const auto& attn = *static_cast<TransformerBlock&>((*model.layers)[l]).attn;
    const Shape shape{batch, capacity, attn.options.n_kv_heads, attn.head_dim};
    keys_.push_back(ops::zeros(shape, {w.dtype(), w.device()}));
    values_.push_back(ops::zeros(shape, {w.dtype(), w.device()}));
  }
}

Tensor KVCacheDecoder::prefill(int64_t b, const std::vector<int64_t>& prompt) {
  SPMD_CHECK(b >= 0 && b < int64_t(length_.size()) && length_[size_t(b)] == 0,
             "KVCacheDecoder::prefill: sequence ", b, " is not an empty row of the cache");
  const int64_t T = int64_t(prompt.size());
  SPMD_CHECK(T > 0 && T <= capacity_, "KVCacheDecoder::prefill: a prompt of ", T,
             " tokens does not fit a cache of ", capacity_, " positions");
  const Tensor ids = ops::from_vector(prompt, Shape{1, T}, model_.tok_embeddings->weight.device());
  return ops::reshape(forward(ids, {b}), {model_.config.vocab_size});
}

Tensor KVCacheDecoder::step(const std::vector<int64_t>& rows, const std::vector<int64_t>& tokens) {
  SPMD_CHECK(!rows.empty() && rows.size() == tokens.size(), "KVCacheDecoder::step: ", rows.size(),
             " rows and ", tokens.size(), " tokens");
  for (const int64_t b : rows)
    SPMD_CHECK(b >= 0 && b < int64_t(length_.size()) && length_[size_t(b)] > 0 &&
                   length_[size_t(b)] < capacity_,
               "KVCacheDecoder::step: sequence ", b, " is not prefilled or its cache is full (",
               capacity_, " positions)");
  const Tensor ids = ops::from_vector(tokens, Shape{int64_t(tokens.size()), 1},
                                      model_.tok_embeddings->weight.device());
  return forward(ids, rows);
}

// nn::Transformer::forward and TransformerBlock::forward, but each block's
// attention goes through the cache.
Tensor KVCacheDecoder::forward(const Tensor& ids, const std::vector<int64_t>& rows) {
  NoGradGuard no_grad;
  const int64_t R = ids.size(0), T = ids.size(1);
  Tensor x = (*model_.tok_embeddings)(ids);  // (R, T, C)
  if (model_.pos_embeddings) {
    std::vector<int64_t> positions;
    for (const int64_t b : rows)
      for (int64_t t = 0; t < T; ++t) positions.push_back(length_[size_t(b)] + t);
    const Tensor pos = ops::from_vector(positions, Shape{R, T}, ids.device());
    x = add(x, (*model_.pos_embeddings)(pos));
  }
  for (size_t l = 0; l < model_.layers->size(); ++l) {
    auto& block = static_cast<TransformerBlock&>((*model_.layers)[l]);
    const Tensor h = add(x, attend(l, *block.attn, (*block.attn_norm)(x), rows));
    x = add(h, block.mlp ? (*block.mlp)((*block.ffn_norm)(h)) : (*block.moe)((*block.ffn_norm)(h)));
  }
  for (const int64_t b : rows) length_[size_t(b)] += T;
  // Only the last position's logits are wanted: the norm and the head run on it alone.
  x = (*model_.norm)(narrow(x, 1, T - 1, 1));
  return last_logits(model_.output ? (*model_.output)(x)
                                   : linear(x, model_.tok_embeddings->weight));
}

// CausalSelfAttention::forward for tokens after the cached ones: each row's
// new keys and values go into its cache, and its queries attend over the
// cache's first length + T positions.
Tensor KVCacheDecoder::attend(size_t layer, CausalSelfAttention& attn, const Tensor& x,
                              const std::vector<int64_t>& rows) {
  auto [q, k, v] = attn.project(x);  // (R, T, H, D), (R, T, Hkv, D)
  const int64_t R = x.size(0), T = x.size(1), H = q.size(2);
  std::vector<Tensor> out;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = rows[size_t(r)], start = length_[size_t(b)];
    SPMD_CHECK(start == 0 || T == 1, "KVCacheDecoder: ", T, " tokens after ", start,
               " cached ones (one at a time after the prefill)");
    const Tensor qr = attn.rotate(narrow(q, 0, r, 1), start);
    const Tensor kr = attn.rotate(narrow(k, 0, r, 1), start);
    const Tensor k_row = ops::narrow(keys_[layer], 0, b, 1),
                 v_row = ops::narrow(values_[layer], 0, b, 1);
    ops::copy_(ops::narrow(k_row, 1, start, T), kr);
    ops::copy_(ops::narrow(v_row, 1, start, T), narrow(v, 0, r, 1));
    const Tensor keys = ops::narrow(k_row, 1, 0, start + T),
                 vals = ops::narrow(v_row, 1, 0, start + T);
    // (1, T, heads, D) -> (1, heads, T, D). The prefill (start 0) is the
    // plain causal case; one new token sees every cached position.
    out.push_back(scaled_dot_product_attention(transpose(qr, 1, 2), transpose(keys, 1, 2),
                                               transpose(vals, 1, 2), /*causal=*/start == 0));
  }
  const Tensor y = R == 1 ? out[0] : cat(out, 0);  // (R, H, T, D)
  return (*attn.wo)(reshape(transpose(y, 1, 2), {R, T, H * attn.head_dim}));
}

// --- Sampling ----------------------------------------------------------------------------

void check_sampling_options(const SamplingOptions& o) {
  SPMD_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "temperature must be >= 0 ",
             "(0: greedy), got ", o.temperature);
  SPMD_CHECK(o.top_k >= 0, "top_k must be >= 0 (0: every token), got ", o.top_k);
  SPMD_CHECK(o.top_p > 0 && o.top_p <= 1, "top_p must lie in (0, 1] (1: every token), got ",
             o.top_p);
}

Sampler::Sampler(const SamplingOptions& options, uint64_t stream)
    : options_(options), rng_(options.seed * 0x9E3779B97F4A7C15ull + stream) {}

int64_t Sampler::next(const float* logits, int64_t V) {
  if (options_.temperature == 0)  // greedy: the first of the largest
    return int64_t(std::max_element(logits, logits + V) - logits);
  // The candidates, most likely first (ties by id, so the order is fixed).
  std::vector<int64_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const auto before = [&](int64_t a, int64_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  order.resize(size_t(k));
  // softmax(logits / temperature) over the k, shifted by the largest.
  std::vector<double> p(order.size());
  double total = 0;
  for (size_t i = 0; i < order.size(); ++i)
    total += p[i] = std::exp((double(logits[order[i]]) - logits[order[0]]) / options_.temperature);
  // Nucleus: the fewest most likely whose share reaches top_p.
  size_t keep = order.size();
  if (options_.top_p < 1) {
    double sum = 0;
    for (keep = 0; keep < order.size();) {
      sum += p[keep++];
      if (sum >= options_.top_p * total) break;
    }
    total = sum;
  }
  const double u = double(rng_() >> 11) * 0x1.0p-53 * total;  // in [0, total)
  double sum = 0;
  for (size_t i = 0; i < keep; ++i)
    if (u < (sum += p[i])) return order[i];
  return order[keep - 1];  // rounding left u at the very top
}

// --- The loop ----------------------------------------------------------------------------

GenerateResult generate(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                        int64_t max_new_tokens, const SamplingOptions& options, int64_t stop_token,
                        int64_t vocab_limit) {
  const int64_t V = model.config.vocab_size, S = model.config.max_seq_len;
  check_sampling_options(options);
  SPMD_CHECK(vocab_limit >= 0 && vocab_limit <= V, "generate: vocab_limit ", vocab_limit,
             " must lie in [0, ", V, "] (0: the model's whole vocabulary)");
  const int64_t drawn = vocab_limit > 0 ? vocab_limit : V;
  SPMD_CHECK(!prompts.empty(), "generate: no prompt given");
  SPMD_CHECK(max_new_tokens >= 1, "generate: max_new_tokens must be >= 1, got ", max_new_tokens);
  int64_t longest = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t n = int64_t(prompts[i].size());
    SPMD_CHECK(n > 0, "prompt ", i + 1, " is empty: generation continues at least one token");
    SPMD_CHECK(n + max_new_tokens <= S, "prompt ", i + 1, " has ", n, " tokens; with ",
               max_new_tokens, " new tokens it needs ", n + max_new_tokens,
               " positions, more than the model's max_seq_len ", S);
    for (const int64_t t : prompts[i])
      SPMD_CHECK(t >= 0 && t < V, "prompt ", i + 1, " holds token ", t, ", outside the ",
                 "vocabulary [0, ", V, ")");
    longest = std::max(longest, n);
  }

  const bool was_training = model.is_training();
  model.eval();
  const int64_t B = int64_t(prompts.size());
  KVCacheDecoder cache(model, B, longest + max_new_tokens);
  std::vector<Sampler> samplers;
  for (int64_t b = 0; b < B; ++b) samplers.emplace_back(options, uint64_t(b));

  GenerateResult result;
  result.tokens.resize(size_t(B));
  std::vector<int64_t> rows;  // the sequences still going
  const auto take = [&](int64_t b, const float* logits) {
    const int64_t t = samplers[size_t(b)].next(logits, drawn);
    result.tokens[size_t(b)].push_back(t);
    if (t != stop_token && int64_t(result.tokens[size_t(b)].size()) < max_new_tokens)
      rows.push_back(b);
  };
  Clock::time_point started = Clock::now();
  for (int64_t b = 0; b < B; ++b) {
    take(b, cache.prefill(b, prompts[size_t(b)]).data<float>());
    result.prefill_tokens += int64_t(prompts[size_t(b)].size());
  }
  result.prefill_seconds = seconds_since(started);
  started = Clock::now();
  while (!rows.empty()) {
    std::vector<int64_t> last;
    for (const int64_t b : rows) last.push_back(result.tokens[size_t(b)].back());
    const Tensor logits = cache.step(rows, last);  // (rows, V)
    const std::vector<int64_t> stepped = std::exchange(rows, {});
    for (size_t r = 0; r < stepped.size(); ++r)
      take(stepped[r], logits.data<float>() + int64_t(r) * V);
    result.decode_tokens += int64_t(stepped.size());
  }
  result.decode_seconds = seconds_since(started);
  model.train(was_training);
  return result;
}

}  // namespace spmd::nn
