// spmd-generate: continue prompts with a trained model.
//
//   spmd-generate --config configs/fsdp.toml --prompt "ROMEO:" --max-new-tokens 200
//   spmd-generate --config X --model model.safetensors --prompts-file prompts.txt
//       --temperature 0.8 --top-k 40 --seed 7
//
// The model is the config's (model.*), with the weights of the latest
// checkpoint of checkpoint.folder (saved under any layout) or of --model: a
// file spmd-train export wrote, or a folder in Hugging Face's GPT-2 layout
// (export --format hf's, or GPT-2's published weights). The tokenizer is
// the config's data.tokenizer: "byte"; "bpe" with the vocabulary
// spmd-tokenize wrote beside data.path (PREFIX.bpe for PREFIX.bin; --vocab
// names another); or "gpt2", GPT-2's own, from data.gpt2_vocab. New tokens
// are drawn from the tokenizer's ids only (a model's vocabulary may be
// padded past them, as GPT-2's 50,257 are to 50,304). All
// prompts decode together as one batch, with a key/value cache
// (autograd/nn/generate.h), on the CPU or one GPU; it prints each prompt
// with its continuation, then the tokens/s of the prefill and the decoding.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "autograd/data/bpe.h"
#include "autograd/data/gpt2_bpe.h"
#include "autograd/data/tokenizer.h"
#include "autograd/nn/generate.h"
#include "runtime/error.h"
#include "runtime/flag_checks.h"
#include "tensor/cuda_api.h"
#include "tensor/threads.h"
#include "train/config.h"
#include "train/trained_model.h"

using namespace spmd;

namespace {

constexpr const char* kUsage =
    "usage: spmd-generate --config FILE [--model PATH] (--prompt TEXT ... |\n"
    "                     --prompts-file FILE) [options] [--section.key=value ...]\n"
    "  --model PATH         weights from an exported file, or a Hugging Face GPT-2 folder\n"
    "                       (default: the latest checkpoint of checkpoint.folder)\n"
    "  --prompt TEXT        a prompt; give it several times for a batch\n"
    "  --prompts-file FILE  one prompt per line\n"
    "  --max-new-tokens N   tokens to add to each prompt (default 100, or fewer: what\n"
    "                       model.seq_len leaves after the longest prompt)\n"
    "  --temperature T      0: greedy; else sample softmax(logits / T) (default 1)\n"
    "  --top-k K            sample among the K most likely (default 0: all)\n"
    "  --top-p P            sample among the fewest most likely reaching P (default 1: all)\n"
    "  --seed S             the sampler's seed (default 0)\n"
    "  --device D           cpu or cuda (default cpu)\n"
    "  --threads N          CPU threads (default: the machine's)\n"
    "  --vocab FILE.bpe     data.tokenizer = \"bpe\"'s vocabulary (default: beside data.path)\n";

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

struct Args {
  std::string config, model, prompts_file, device = "cpu", vocab;
  std::vector<std::string> prompts, overrides;
  int64_t max_new_tokens = -1;  // unset: 100, or what the context leaves the longest prompt
  int threads = 0;
  nn::SamplingOptions sampling{1.0, 0, 1.0, 0};
};

// A flag's value, checked as every spmd binary checks its numeric flags
// (runtime/flag_checks.h): the message names the flag, its need and the value.
int64_t count_flag(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  const std::string why = flags::count_error(text, min, max);
  SPMD_CHECK(why.empty(), flag, ": ", why);
  return std::strtoll(text.c_str(), nullptr, 10);
}

// A finite number; its range is nn::check_sampling_options's to say.
double number_flag(const std::string& flag, const std::string& text) {
  const std::string why = flags::number_error(text, std::numeric_limits<double>::lowest(),
                                              std::numeric_limits<double>::max(), false);
  SPMD_CHECK(why.empty(), flag, ": ", why);
  return std::strtod(text.c_str(), nullptr);
}

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
    } else if (arg == "--config") {
      a.config = value();
    } else if (arg == "--model") {
      a.model = value();
    } else if (arg == "--prompt") {
      a.prompts.push_back(value());
    } else if (arg == "--prompts-file") {
      a.prompts_file = value();
    } else if (arg == "--max-new-tokens") {
      a.max_new_tokens = count_flag(arg, value(), 1, kInt32Max);
    } else if (arg == "--temperature") {
      a.sampling.temperature = number_flag(arg, value());
    } else if (arg == "--top-k") {
      a.sampling.top_k = count_flag(arg, value(), 0, kInt32Max);
    } else if (arg == "--top-p") {
      a.sampling.top_p = number_flag(arg, value());
    } else if (arg == "--seed") {
      a.sampling.seed = uint64_t(count_flag(arg, value(), 0, kInt64Max));
    } else if (arg == "--device") {
      a.device = value();
    } else if (arg == "--threads") {
      a.threads = int(count_flag(arg, value(), 1, 1024));
    } else if (arg == "--vocab") {
      a.vocab = value();
    } else if (arg.rfind("--", 0) == 0 && arg.find('.') != std::string::npos) {
      std::string kv = arg.substr(2);
      if (kv.find('=') == std::string::npos) kv += "=" + value();
      a.overrides.push_back(kv);
    } else {
      SPMD_THROW(InvalidArgument, "unknown argument '", arg, "'\n", kUsage);
    }
  }
  return a;
}

// One prompt per line; a line of nothing is an empty prompt (refused later,
// by its number). A last line without its newline counts.
std::vector<std::string> read_prompts(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  SPMD_CHECK(f.good(), "--prompts-file: cannot read ", path);
  std::vector<std::string> out;
  for (std::string line; std::getline(f, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    out.push_back(line);
  }
  SPMD_CHECK(!f.bad(), "--prompts-file: reading ", path, " failed");
  SPMD_CHECK(!out.empty(), "--prompts-file: ", path, " holds no prompt");
  return out;
}

struct TextCodec {
  std::function<std::vector<int64_t>(const std::string&)> encode;
  std::function<std::string(const std::vector<int64_t>&)> decode;
  int64_t vocab_size = 0;  // the tokenizer's: new tokens are drawn below it
};

TextCodec codec_for(const train::TrainConfig& config, const std::string& vocab_flag) {
  if (config.data.tokenizer == "byte") {
    auto t = std::make_shared<data::ByteTokenizer>();
    return {[t](const std::string& s) { return t->encode(s); },
            [t](const std::vector<int64_t>& ids) { return t->decode(ids); },
            data::ByteTokenizer::kVocabSize};
  }
  if (config.data.tokenizer == "gpt2") {
    auto t =
        std::make_shared<data::Gpt2Tokenizer>(data::Gpt2Tokenizer::load(config.data.gpt2_vocab));
    SPMD_CHECK(t->vocab_size() <= config.model.vocab_size,
               "data.gpt2_vocab: ", config.data.gpt2_vocab, " has ", t->vocab_size(),
               " tokens, more than model.vocab_size ", config.model.vocab_size);
    return {[t](const std::string& s) { return t->encode(s); },
            [t](const std::vector<int64_t>& ids) { return t->decode(ids); }, t->vocab_size()};
  }
  std::string vocab = vocab_flag;
  if (vocab.empty()) {
    const std::string& p = config.data.path;
    const size_t dot = p.rfind('.');
    vocab = (dot == std::string::npos ? p : p.substr(0, dot)) + ".bpe";
  }
  auto t = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load(vocab));
  SPMD_CHECK(t->vocab_size() <= config.model.vocab_size, "the vocabulary ", vocab, " has ",
             t->vocab_size(), " tokens, more than model.vocab_size ", config.model.vocab_size);
  return {[t](const std::string& s) { return t->encode(s); },
          [t](const std::vector<int64_t>& ids) { return t->decode(ids); }, t->vocab_size()};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args = parse_args(argc, argv);
    nn::check_sampling_options(args.sampling);
    SPMD_CHECK(args.prompts.empty() || args.prompts_file.empty(),
               "give prompts with --prompt or --prompts-file, not both");
    if (!args.prompts_file.empty()) args.prompts = read_prompts(args.prompts_file);
    SPMD_CHECK(!args.prompts.empty(), "no prompt: give --prompt TEXT or --prompts-file FILE\n",
               kUsage);
    SPMD_CHECK(args.device == "cpu" || args.device == "cuda", "--device must be cpu or cuda, ",
               "got '", args.device, "'");
    SPMD_CHECK(args.device == "cpu" || cuda::is_available(),
               "--device cuda: no GPU here (or a build without CUDA)");
    if (args.threads > 0) set_num_threads(args.threads);

    const train::TrainConfig config = train::load_config(args.config, args.overrides);
    const TextCodec codec = codec_for(config, args.vocab);
    std::vector<std::vector<int64_t>> prompts;
    for (const std::string& p : args.prompts) prompts.push_back(codec.encode(p));
    // The prompts' limits are checked before the weights are read.
    const int64_t S = train::transformer_config(config.model).max_seq_len;
    for (size_t i = 0; i < prompts.size(); ++i)
      SPMD_CHECK(!prompts[i].empty(), "prompt ", i + 1, " is empty: generation continues at ",
                 "least one token");
    if (args.max_new_tokens < 0) {
      size_t longest = 0;
      for (const auto& p : prompts) longest = std::max(longest, p.size());
      args.max_new_tokens = std::max<int64_t>(1, std::min<int64_t>(100, S - int64_t(longest)));
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      SPMD_CHECK(int64_t(prompts[i].size()) + args.max_new_tokens <= S, "prompt ", i + 1, " has ",
                 prompts[i].size(), " tokens; with --max-new-tokens ", args.max_new_tokens,
                 " it needs ", int64_t(prompts[i].size()) + args.max_new_tokens,
                 " positions, more than model.seq_len ", S);
    }

    train::TrainedModel trained = train::load_trained_model(config, args.model);
    if (args.device == "cuda") trained.model->to(Device::cuda(0));
    const nn::GenerateResult r =
        nn::generate(*trained.model, prompts, args.max_new_tokens, args.sampling, -1,
                     std::min(codec.vocab_size, config.model.vocab_size));
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::printf("--- sample %zu: %zu prompt tokens + %zu new ---\n%s%s\n", i + 1,
                  prompts[i].size(), r.tokens[i].size(), args.prompts[i].c_str(),
                  codec.decode(r.tokens[i]).c_str());
    }
    const auto rate = [](int64_t n, double s) { return s > 0 ? double(n) / s : 0.0; };
    std::printf(
        "spmd-generate: %s%s on %s, batch %zu: prefill %lld tokens in %.1f ms (%.0f tokens/s), "
        "decode %lld tokens in %.1f ms (%.0f tokens/s)\n",
        trained.source.c_str(),
        trained.step >= 0 ? (" step " + std::to_string(trained.step)).c_str() : "",
        args.device.c_str(), prompts.size(), (long long)r.prefill_tokens, r.prefill_seconds * 1e3,
        rate(r.prefill_tokens, r.prefill_seconds), (long long)r.decode_tokens,
        r.decode_seconds * 1e3, rate(r.decode_tokens, r.decode_seconds));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
