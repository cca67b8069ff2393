// Random and sequential windows of a tokenized text.
#include "autograd/data/text_dataset.h"

#include "runtime/resource_limits.h"
#include "tensor/ops.h"

namespace spmd::data {

TextDataset::TextDataset(const std::string& text, double val_fraction) {
  split(ByteTokenizer().encode(text), val_fraction);
}

TextDataset TextDataset::from_tokens(std::vector<int64_t> tokens, double val_fraction) {
  TextDataset ds;
  ds.split(tokens, val_fraction);
  return ds;
}

void TextDataset::split(const std::vector<int64_t>& all, double val_fraction) {
  SPMD_CHECK(val_fraction >= 0 && val_fraction < 1, "TextDataset: val_fraction must lie in ",
             "[0, 1), got ", val_fraction);
  const size_t n_train = size_t(double(all.size()) * (1 - val_fraction));
  train_.assign(all.begin(), all.begin() + std::ptrdiff_t(n_train));
  val_.assign(all.begin() + std::ptrdiff_t(n_train), all.end());
}

TextDataset TextDataset::from_file(const std::string& path, double val_fraction) {
  // At the peak of the constructor each byte of text is also an int64 token
  // of `all` and one of train_ or val_: 17 bytes of memory per byte of file.
  return TextDataset(read_file_bounded(path, "the text file", 17), val_fraction);
}

Batch TextDataset::sample(Split split, int64_t B, int64_t T, Generator& gen) const {
  const int64_t n = size(split);
  SPMD_CHECK(B > 0 && T > 0 && n >= T + 1,
             "TextDataset::sample: need B, T > 0 and at least T + 1 = ", T + 1, " tokens, the ",
             split == Split::kTrain ? "train" : "val", " split has ", n);
  const std::vector<int64_t> starts =
      ops::to_vector<int64_t>(ops::randint(0, n - T, {B}, {DType::kI64}, &gen));
  return batch_at(split, starts, T);
}

std::vector<Batch> TextDataset::eval_batches(Split split, int64_t B, int64_t T,
                                             int64_t max_batches) const {
  const int64_t windows = (size(split) - 1) / T;  // each needs T + 1 tokens, overlapping by one
  std::vector<Batch> out;
  for (int64_t w = 0; w + B <= windows && int64_t(out.size()) < max_batches; w += B) {
    std::vector<int64_t> starts;
    for (int64_t b = 0; b < B; ++b) starts.push_back((w + b) * T);
    out.push_back(batch_at(split, starts, T));
  }
  return out;
}

Batch TextDataset::batch_at(Split split, const std::vector<int64_t>& starts, int64_t T) const {
  const std::vector<int64_t>& toks = tokens(split);
  const int64_t B = int64_t(starts.size());
  for (int64_t start : starts) {
    SPMD_CHECK(start >= 0 && start + T + 1 <= int64_t(toks.size()),
               "TextDataset::batch_at: a window of ", T + 1, " tokens at ", start,
               " does not fit in the ", toks.size(), "-token split");
  }
  std::vector<int64_t> x(size_t(B * T)), y(size_t(B * T));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      x[size_t(b * T + t)] = toks[size_t(starts[size_t(b)] + t)];
      y[size_t(b * T + t)] = toks[size_t(starts[size_t(b)] + t + 1)];
    }
  }
  return {ops::from_vector(x, {B, T}), ops::from_vector(y, {B, T})};
}

}  // namespace spmd::data
