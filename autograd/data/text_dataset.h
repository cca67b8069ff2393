// A language-modeling dataset over one text (byte tokens) or a list of
// tokens (from_tokens): its tokens split into a train
// part (the first 1 - val_fraction) and a held-out val part (the rest).
// sample() draws B windows of T + 1 consecutive tokens at random start
// positions (from a seeded generator, so a run is reproducible) and returns
// them as inputs x = window[0:T] and targets y = window[1:T+1]: the model
// learns to predict each next token. eval_batches() covers a part with
// consecutive non-overlapping windows instead, for a deterministic loss.
#pragma once

#include <string>
#include <vector>

#include "autograd/data/tokenizer.h"
#include "tensor/random.h"
#include "tensor/tensor.h"

namespace spmd::data {

enum class Split { kTrain, kVal };

struct Batch {
  Tensor x;  // (B, T) i64 inputs
  Tensor y;  // (B, T) i64 targets: x shifted by one
};

class TextDataset {
 public:
  // REQUIRES: 0 <= val_fraction < 1.
  explicit TextDataset(const std::string& text, double val_fraction = 0.1);
  // Reads a file; throws naming it when it cannot be read.
  static TextDataset from_file(const std::string& path, double val_fraction = 0.1);
  // Tokens already made (a BPE token file, data/token_file.h).
  static TextDataset from_tokens(std::vector<int64_t> tokens, double val_fraction = 0.1);

  int64_t size(Split split) const { return int64_t(tokens(split).size()); }
  // B random windows of the split. REQUIRES: the split holds at least T + 1 tokens.
  Batch sample(Split split, int64_t B, int64_t T, Generator& gen) const;
  // Consecutive windows from the split's start, B per batch, at most max_batches batches.
  std::vector<Batch> eval_batches(Split split, int64_t B, int64_t T, int64_t max_batches) const;
  // The windows of T + 1 tokens that start at `starts` (a sampler's choice,
  // such as window i * T for a DistributedSampler's index i). Throws when
  // one runs past the split's end.
  Batch batch_at(Split split, const std::vector<int64_t>& starts, int64_t T) const;

 private:
  const std::vector<int64_t>& tokens(Split split) const {
    return split == Split::kTrain ? train_ : val_;
  }
  TextDataset() = default;
  void split(const std::vector<int64_t>& all, double val_fraction);
  std::vector<int64_t> train_, val_;
};

}  // namespace spmd::data
