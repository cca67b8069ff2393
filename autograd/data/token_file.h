// A file of tokens, in llm.c's .bin layout so that either side can read the
// other's: a header of 256 little-endian int32, then the tokens as uint16.
//
//   header[0] = 20240520 (the magic)   header[1] = 1 (the version)
//   header[2] = the number of tokens   header[3] = the vocabulary size
//                                      (spmd's; 0 when unknown, as llm.c writes it)
//
// spmd-tokenize writes them; spmd-train reads them (data.tokenizer = "bpe").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace spmd::data {

struct TokenFile {
  std::vector<int64_t> tokens;
  int64_t vocab_size = 0;  // 0: the file does not say
};

// REQUIRES: every token in [0, 65536) and below vocab_size when it is > 0 (checked).
void write_token_file(const std::string& path, const std::vector<int64_t>& tokens,
                      int64_t vocab_size);
// Throws InvalidArgument naming the file: cannot be opened, a wrong magic or
// version, a size that differs from the header's count, a token at or above
// the header's vocabulary size.
TokenFile read_token_file(const std::string& path);

}  // namespace spmd::data
