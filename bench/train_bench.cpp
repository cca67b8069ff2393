// spmd-bench-train: tokens per second of one GPT-2 training step (forward,
// cross-entropy, backward, AdamW) in f32 on the CPU, and the process's peak
// resident memory. One configuration and thread count per run, so that the
// peak RSS belongs to that run alone; bench/train_bench.py runs it beside
// the PyTorch peer (bench/peers/torch_train.py) for each case and prints the
// ratios.
//
// Random byte tokens (a fresh batch each step, drawn before the clock
// starts), AdamW lr 3e-4 weight decay 0.1, the median step time over
// --steps steps after --warmup untimed ones.
//
//   spmd-bench-train --config tiny --threads 1 [--steps 20] [--warmup 3]
// prints one line:
//   spmd config=tiny threads=1 params=842496 tokens_per_s=... step_ms=... peak_rss_mb=...
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "autograd/autograd.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

struct Flags {
  std::string config = "tiny";
  int threads = 1;
  int steps = 20;
  int warmup = 3;
  int64_t batch = 8;
};

double peak_rss_mb() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void run(const Flags& f) {
  set_num_threads(f.threads);
  const nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  nn::Transformer model(config, 0);
  optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
  const int64_t B = f.batch, T = config.max_seq_len;
  Generator gen(1);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    xs.push_back(ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen));
    ys.push_back(ops::randint(0, config.vocab_size, {B, T}, {DType::kI64}, &gen));
  }
  std::vector<double> times;
  for (int i = 0; i < f.warmup + f.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const Tensor loss = cross_entropy(model(xs[size_t(i)]), ys[size_t(i)]);
    opt.zero_grad();
    backward(loss);
    opt.step();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i >= f.warmup) times.push_back(seconds);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf(
      "spmd config=%s threads=%d params=%lld tokens_per_s=%.0f step_ms=%.2f peak_rss_mb=%.1f\n",
      f.config.c_str(), f.threads, (long long)model.num_parameters(), double(B * T) / median,
      median * 1e3, peak_rss_mb());
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"Tokens per second of a GPT-2 training step (f32, CPU)."};
  app.add_option("--config", f.config, "tiny or small")->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--threads", f.threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--steps", f.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", f.warmup, "untimed steps first")->check(CLI::NonNegativeNumber);
  app.add_option("--batch", f.batch, "sequences per batch")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    run(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spmd-bench-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
