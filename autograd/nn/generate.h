// Text generation: a Transformer continues prompts one token at a time.
//
// A forward over the whole sequence for every new token would redo the work
// of every earlier position. Their keys and values never change (attention
// is causal: position i never sees a later one), so a key/value cache keeps
// them. One forward over each prompt, the prefill, fills the cache; each
// decoding step then runs the model over one new token per sequence, whose
// query attends over the cached keys and values and its own. A step's work
// is one token's: the projections and the MLP on B rows, and attention over
// the positions so far.
//
// Shapes: B sequences, each with a length of its own (prompts may differ in
// length), H query heads, Hkv key/value heads of size D, a capacity of S
// positions; per layer the cache holds k and v (B, S, Hkv, D), row b's first
// length(b) positions filled.
//
// The model is the one-process nn::Transformer, whole on one device (CPU or
// CUDA), in evaluation mode: dropout is off while generating.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "autograd/nn/transformer.h"

namespace spmd::nn {

class KVCacheDecoder {
 public:
  // Room for `batch` sequences of up to `capacity` positions each, on the
  // model's device. REQUIRES: 0 < capacity <= the model's max_seq_len.
  KVCacheDecoder(Transformer& model, int64_t batch, int64_t capacity);

  // Runs `prompt` through the model as sequence b, from position 0, and
  // caches its keys and values. Returns the logits after its last token
  // (V), f32 on the CPU. REQUIRES: b's cache is empty, and the prompt is not
  // empty and fits the capacity (checked).
  Tensor prefill(int64_t b, const std::vector<int64_t>& prompt);

  // Appends tokens[r] to sequence rows[r] (each at its own next position)
  // and returns the logits after it: (rows.size(), V), f32 on the CPU.
  // REQUIRES: every row was prefilled and has room for one more (checked).
  Tensor step(const std::vector<int64_t>& rows, const std::vector<int64_t>& tokens);

  int64_t length(int64_t b) const { return length_.at(size_t(b)); }
  int64_t capacity() const { return capacity_; }

 private:
  // ids (R, T) for sequences rows[r], each placed from its own length on.
  // T > 1 only for a prefill (lengths 0), whose causal mask is then the
  // plain one; a decoding step's single token sees every cached position.
  Tensor forward(const Tensor& ids, const std::vector<int64_t>& rows);
  Tensor attend(size_t layer, CausalSelfAttention& attn, const Tensor& x,
                const std::vector<int64_t>& rows);

  Transformer& model_;
  int64_t capacity_;
  std::vector<int64_t> length_;        // per sequence, positions filled
  std::vector<Tensor> keys_, values_;  // per layer, (B, S, Hkv, D)
};

// How the next token is chosen from the logits.
struct SamplingOptions {
  double temperature = 0;  // 0: greedy (the argmax); else softmax(logits / temperature)
  int64_t top_k = 0;       // > 0: only the k most likely tokens
  double top_p = 1.0;      // < 1: only the fewest most likely whose probabilities reach top_p
  uint64_t seed = 0;
};

// Draws tokens from logits on the host. Deterministic: the same options and
// logits give the same tokens on every machine (its own 53-bit uniforms from
// std::mt19937_64, whose sequence the standard fixes).
class Sampler {
 public:
  // `stream` separates the sequences of one run: each prompt draws from its
  // own stream, so its text does not depend on the others in its batch.
  Sampler(const SamplingOptions& options, uint64_t stream);
  int64_t next(const float* logits, int64_t vocab_size);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

// Throws InvalidArgument naming the option and its range for a negative
// temperature, a negative top_k or a top_p outside (0, 1].
void check_sampling_options(const SamplingOptions& options);

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  // per prompt, the new tokens
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

// Continues each prompt by up to max_new_tokens tokens, stopping a sequence
// early at `stop_token` (>= 0; kept in its output) when one is given. New
// tokens are drawn from the first `vocab_limit` ids (> 0; 0: all V), for a
// tokenizer with fewer tokens than the model's padded vocabulary. All
// prompts decode together, one step for the whole batch. REQUIRES: every
// prompt non-empty, its tokens in [0, V), and its length plus max_new_tokens
// within max_seq_len (checked before anything is allocated, naming the
// prompt and the limit).
GenerateResult generate(Transformer& model, const std::vector<std::vector<int64_t>>& prompts,
                        int64_t max_new_tokens, const SamplingOptions& options,
                        int64_t stop_token = -1, int64_t vocab_limit = 0);

}  // namespace spmd::nn
