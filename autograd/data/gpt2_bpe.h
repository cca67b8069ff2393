// GPT-2's own tokenizer: byte-level BPE with the vocabulary OpenAI published,
// read from its two files, so that spmd's token ids are GPT-2's (and
// tiktoken's "gpt2" encoding's: tests/autograd/test_gpt2_tiktoken.cpp checks
// them id for id).
//
//   encoder.json  one JSON object, token string -> id (50,257 of them). A
//                 token's bytes are written as characters of GPT-2's
//                 byte-to-character map: each of the 256 bytes is one
//                 printable character ('!' is itself, the space is 'Ġ').
//   vocab.bpe     "#version: ..." then one merge "left right" a line, in
//                 those characters; the merge's rank is its place in the file.
//
// Encoding has two steps. Pre-tokenization cuts the text into chunks as
// GPT-2's regular expression does, written out by hand over UTF-8 code
// points (gpt2_pretokenize.cpp):
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// so a chunk is a contraction, a word, a number or a run of punctuation
// (each with the space before it), or whitespace; a run of whitespace
// before a word leaves its last space to the word. Then each chunk, as
// bytes, is merged pair by pair, always the neighbouring pair of lowest
// rank, until no pair of the chunk has a merge (found by a scan in a short
// chunk, through a heap in a long one). A chunk seen before in the same
// encode() takes its ids from a cache.
//
// Choices where GPT-2 does not say:
//   - Bytes that are not well-formed UTF-8: each such byte is a character of
//     its own, of class "other" (so it joins a run of punctuation). Every
//     byte string encodes, and decode(encode(x)) == x for any x.
//   - \p{L}, \p{N} and \s follow the Unicode version of kUnicodeVersion
//     (unicode_classes.h); \s is the White_Space property, as in tiktoken's
//     Rust core. (JavaScript's \s, which js-tiktoken uses, also counts
//     U+FEFF and not U+0085: those two code points are the only ones where
//     the two may differ.)
//   - "<|endoftext|>" (id 50256) in the text is ordinary text: encode()
//     never emits a special token.
//
// Not here: other encodings (cl100k and later), special tokens, training a
// vocabulary (bpe.h learns spmd's own).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace spmd::data {

// Immutable once loaded: encode() and decode() may run on several threads at
// once (each encode() keeps its own cache).
class Gpt2Tokenizer {
 public:
  // Reads `dir`/encoder.json and `dir`/vocab.bpe.
  static Gpt2Tokenizer load(const std::string& dir);
  // Throws InvalidArgument naming the file and the line (and the column, in
  // encoder.json) of the first thing that does not parse or does not agree
  // with the rest: a merge of tokens that encoder.json lacks, a merge or an
  // id given twice, a byte with no token of its own, ids that are not
  // 0..N-1 each once.
  static Gpt2Tokenizer load(const std::string& encoder_json, const std::string& vocab_bpe);

  // The number of tokens in encoder.json (50,257 for GPT-2).
  int64_t vocab_size() const { return int64_t(bytes_.size()); }
  int64_t merge_count() const { return int64_t(merges_.size()); }

  std::vector<int64_t> encode(std::string_view text) const;
  // REQUIRES: every id lies in [0, vocab_size()) (checked).
  std::string decode(const std::vector<int64_t>& ids) const;
  // The bytes of token `id`. REQUIRES: id in [0, vocab_size()) (checked).
  const std::string& token_bytes(int64_t id) const;

 private:
  struct Merge {
    int32_t rank;    // the line of vocab.bpe, from 0
    int32_t merged;  // the id of left + right
  };
  Gpt2Tokenizer() = default;
  static uint64_t pair_key(int32_t left, int32_t right) {
    return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
  }
  // The ids of one chunk, merged by rank, into `ids`; `ranks` is a buffer the
  // caller keeps between calls. merge_long_chunk: the same for long chunks.
  void merge_chunk(std::string_view chunk, std::vector<int32_t>& ids,
                   std::vector<int32_t>& ranks) const;
  void merge_long_chunk(std::string_view chunk, std::vector<int32_t>& ids) const;
  const Merge* find_merge(int32_t left, int32_t right) const;

  std::vector<std::string> bytes_;              // id -> the token's bytes
  std::array<int32_t, 256> byte_token_{};       // byte -> its one-byte token
  std::unordered_map<uint64_t, Merge> merges_;  // (left << 32 | right) -> merge
};

// Where the chunk that starts at `start` ends (GPT-2's pre-tokenization).
// REQUIRES: start < text.size().
size_t gpt2_chunk_end(std::string_view text, size_t start);
// The text's chunks, as views into it (for tests; encode() walks
// gpt2_chunk_end itself).
std::vector<std::string_view> gpt2_chunks(std::string_view text);

// GPT-2's byte-to-character map: the printable bytes '!'..'~', U+00A1..U+00AC
// and U+00AE..U+00FF stand for themselves, the 68 others (controls, space,
// U+00AD) for U+0100, U+0101, ... in byte order.
char32_t gpt2_byte_char(uint8_t byte);

}  // namespace spmd::data
