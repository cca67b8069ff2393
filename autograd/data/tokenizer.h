// The byte-level tokenizer: every byte of UTF-8 text is one token, so the
// vocabulary is the 256 byte values and no text is out of vocabulary.
// data/bpe.h merges frequent byte pairs into more tokens.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace spmd::data {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  std::vector<int64_t> encode(std::string_view text) const;
  // REQUIRES: every id lies in [0, 256) (checked).
  std::string decode(const std::vector<int64_t>& ids) const;
};

}  // namespace spmd::data
