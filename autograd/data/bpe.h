// Byte-pair encoding (BPE), byte-level as GPT-2's: the vocabulary starts as
// the 256 byte values, and training adds one token at a time, the merge of
// the pair of neighbouring tokens that occurs most often in the text, until
// the vocabulary has the size asked for. Encoding replays the merges in the
// order they were learned, so a frequent word becomes one token and any
// byte string still encodes (no text is out of vocabulary).
//
// Merges never cross the boundary of a chunk, so that " the" and "the," do
// not waste tokens on pieces of two words. Chunks, GPT-2's pre-tokenization
// simplified to ASCII classes:
//
//   an optional space, then a run of letters (bytes >= 0x80 count as letters,
//   so UTF-8 words stay whole) | an optional space, then a run of digits |
//   a run of other whitespace | any other single byte
//
// Training counts each distinct chunk once with its frequency, so its cost
// grows with the number of distinct words, not the text's length. Ties
// between equally frequent pairs go to the smaller (left, right) pair of
// ids, so training is deterministic.
//
// The vocabulary file is text: "spmd-bpe 1", then "vocab_size N", then one
// merge per line, "left right" as ids (token 256 + i is merge i).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace spmd::data {

class BpeTokenizer {
 public:
  // Learns vocab_size - 256 merges from `text`. Throws InvalidArgument for a
  // vocab_size below 256 or above 65,536 (a token file's uint16); stops
  // early, with a smaller vocabulary, when no pair occurs twice.
  static BpeTokenizer train(std::string_view text, int64_t vocab_size);
  // Reads a vocabulary file; throws naming the file and the line that is wrong.
  static BpeTokenizer load(const std::string& path);
  void save(const std::string& path) const;

  int64_t vocab_size() const { return 256 + int64_t(merges_.size()); }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

  std::vector<int64_t> encode(std::string_view text) const;
  // REQUIRES: every id lies in [0, vocab_size()) (checked).
  std::string decode(const std::vector<int64_t>& ids) const;

 private:
  explicit BpeTokenizer(std::vector<std::pair<int32_t, int32_t>> merges);
  std::vector<std::pair<int32_t, int32_t>> merges_;  // token 256 + i = merges_[i]
  std::vector<std::string> bytes_;                   // each token's bytes
};

// The text's chunks (see above), as views into it.
std::vector<std::string_view> bpe_chunks(std::string_view text);

}  // namespace spmd::data
