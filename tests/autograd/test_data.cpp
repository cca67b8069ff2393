// data/: the BPE tokenizer against a hand-worked example and round trips,
// its vocabulary and token files against their own readers (and each
// malformed file refused, naming it), and a dataset built from tokens.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "autograd/data/bpe.h"
#include "autograd/data/text_dataset.h"
#include "autograd/data/token_file.h"
#include "tests/error_of.h"

using namespace spmd;
using namespace spmd::data;
using Catch::Matchers::Contains;
using spmd::testing::error_of;

namespace {

std::string temp_path(const std::string& name) {
  return "/tmp/spmd_test_data_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> chunks(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view c : bpe_chunks(text)) out.emplace_back(c);
  return out;
}

}  // namespace

TEST_CASE("bpe_chunks: words with their leading space, digits, whitespace, other bytes",
          "[data][bpe]") {
  CHECK(chunks("Hello, world  42!\n\nThe") ==
        std::vector<std::string>{"Hello", ",", " world", " ", " 42", "!", "\n\n", "The"});
  CHECK(chunks("") == std::vector<std::string>{});
  CHECK(chunks("caf\xc3\xa9 ok") == std::vector<std::string>{"caf\xc3\xa9", " ok"});  // UTF-8 whole
}

TEST_CASE("BPE learns Wikipedia's aaabdaaabac example merge by merge", "[data][bpe]") {
  // aa (4 times) -> 256; then "256 a" and "a b" both occur twice and the
  // tie goes to the smaller pair, (a, b) -> 257; then (256, 257) twice -> 258:
  // aaabdaaabac = 258 d 258 a c.
  const BpeTokenizer bpe = BpeTokenizer::train("aaabdaaabac", 259);
  using P = std::pair<int32_t, int32_t>;
  CHECK(bpe.merges() == std::vector<P>{{'a', 'a'}, {'a', 'b'}, {256, 257}});
  CHECK(bpe.encode("aaabdaaabac") == std::vector<int64_t>{258, 'd', 258, 'a', 'c'});
  CHECK(bpe.decode({258}) == "aaab");
  // Nothing left that occurs twice: training stops short of the size asked.
  CHECK(BpeTokenizer::train("aaabdaaabac", 1000).vocab_size() == 259);
}

TEST_CASE("BPE round-trips any bytes and shortens text like its own", "[data][bpe]") {
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  // Each word takes (its length - 1) merges to become one token: "the" 2,
  // " quick" 5, " brown" 5, " fox" 3, " jumps" 5, " over" 4, " lazy" 4,
  // " dog" 3, and " the" one more on top of "the": 32. Then no pair is left
  // in any chunk, and training stops at 256 + 32 of the 300 asked.
  const BpeTokenizer bpe = BpeTokenizer::train(text, 300);
  CHECK(bpe.vocab_size() == 256 + 32);
  const auto ids = bpe.encode(text);
  CHECK(bpe.decode(ids) == text);
  // Per sentence 9 words and "." (its last space begins the next " the"),
  // and the text's final space: 300 x 10 + 1.
  CHECK(ids.size() == 3001);
  std::string bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(static_cast<char>(255 - b));
  bytes += "\xff\xfe not UTF-8 \x80";
  CHECK(bpe.decode(bpe.encode(bytes)) == bytes);
  CHECK_THAT(error_of([&] { bpe.decode({300}); }), Contains("id 300 is not in the vocabulary"));
  CHECK_THAT(error_of([] { BpeTokenizer::train("x", 100); }), Contains("vocab_size must be in"));
}

TEST_CASE("BPE vocabulary files: what is saved loads the same; a bad file names its line",
          "[data][bpe]") {
  const BpeTokenizer bpe = BpeTokenizer::train("abab abab cdcd abab cd", 270);
  const std::string path = temp_path("vocab.bpe");
  bpe.save(path);
  const BpeTokenizer back = BpeTokenizer::load(path);
  CHECK(back.merges() == bpe.merges());
  CHECK(back.encode("abab cd") == bpe.encode("abab cd"));
  const auto write = [&](const std::string& text) {
    std::ofstream(path) << text;
    return error_of([&] { BpeTokenizer::load(path); });
  };
  CHECK_THAT(write("hello\n"), Contains(":1: not an spmd-bpe vocabulary"));
  CHECK_THAT(write("spmd-bpe 1\nvocab_size 100\n"), Contains(":2: expected \"vocab_size N\""));
  CHECK_THAT(write("spmd-bpe 1\nvocab_size 258\n97 98\n"), Contains(":4: expected a merge"));
  CHECK_THAT(write("spmd-bpe 1\nvocab_size 257\n97 300\n"),
             Contains(":3: merge (97, 300) names a token not yet defined"));
  std::filesystem::remove(path);
}

TEST_CASE("token files: llm.c's header and uint16 tokens, checked when read", "[data][tokens]") {
  const std::string path = temp_path("tokens.bin");
  const std::vector<int64_t> tokens = {0, 1, 300, 65535 % 1000, 999};
  write_token_file(path, tokens, 1000);
  CHECK(std::filesystem::file_size(path) == 256 * 4 + tokens.size() * 2);
  const TokenFile back = read_token_file(path);
  CHECK(back.tokens == tokens);
  CHECK(back.vocab_size == 1000);
  CHECK_THAT(error_of([&] { write_token_file(path, {1000}, 1000); }),
             Contains("token 0 is 1000, outside [0, 1000)"));
  {  // cut short: the header's count no longer matches
    std::filesystem::resize_file(path, 256 * 4 + 4);
    CHECK_THAT(error_of([&] { read_token_file(path); }),
               Contains("the header says 5 tokens (1034 bytes) but the file has 1028 bytes"));
  }
  std::ofstream(path) << "plain text, not tokens";
  CHECK_THAT(error_of([&] { read_token_file(path); }), Contains("is not a token file"));
  std::filesystem::remove(path);
  CHECK_THAT(error_of([&] { read_token_file(path); }), Contains("cannot read"));

  const TextDataset ds = TextDataset::from_tokens({5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, 0.2);
  CHECK(ds.size(Split::kTrain) == 8);
  CHECK(ds.size(Split::kVal) == 2);
}
