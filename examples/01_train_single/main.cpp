// 01_train_single: train a GPT-2-shaped character model on a text file, in
// one process, with no parallelism: the baseline every later example (DDP,
// pipeline, tensor parallel...) is compared against.
//
// The loop is the one every trainer runs:
//   sample a batch -> forward -> loss -> backward -> clip -> AdamW step
// with a linear warm-up then cosine decay of the learning rate, a log line
// every --log-every steps, and at the end the loss on held-out text.
//
//   01_train_single --data ../shared/data/tinyshakespeare.txt --config tiny --steps 600
#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "autograd/autograd.h"
#include "autograd/data/text_dataset.h"
#include "autograd/nn/memory_estimate.h"
#include "autograd/nn/transformer.h"
#include "autograd/optim/adamw.h"
#include "autograd/optim/clip_grad.h"
#include "autograd/optim/lr_schedule.h"
#include "runtime/flag_checks.h"
#include "runtime/resource_limits.h"
#include "tensor/ops.h"
#include "tensor/threads.h"

using namespace spmd;

namespace {

struct Flags {
  std::string data;
  std::string config = "tiny";
  int64_t steps = 600;
  double lr = 2e-3;
  int64_t batch = 8;
  uint64_t seed = 1337;
  int threads = 1;
  int64_t log_every = 50;
  int64_t warmup = 50;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  int64_t eval_batches = 20;
};

Flags parse_flags(int argc, char** argv) {
  Flags f;
  CLI::App app{"Train a GPT-2-shaped character model on one text file, in one process."};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // later wins
  app.add_option("--data", f.data, "text file to train on (the last 10% is held out)")->required();
  app.add_option("--config", f.config, "model size: tiny (0.8M parameters) or small (10.8M)")
      ->check(CLI::IsMember({"tiny", "small"}));
  app.add_option("--steps", f.steps, "optimizer steps")->check(spmd::flags::count(1));
  app.add_option("--lr", f.lr, "peak learning rate")->check(spmd::flags::positive());
  app.add_option("--batch", f.batch, "sequences per batch")->check(spmd::flags::count(1));
  app.add_option("--seed", f.seed, "seed of the weights and of the batches");
  app.add_option("--threads", f.threads, "CPU threads")->check(spmd::flags::count(1, 1024));
  app.add_option("--log-every", f.log_every, "steps between log lines")
      ->check(spmd::flags::count(1));
  app.add_option("--warmup", f.warmup, "warm-up steps")->check(spmd::flags::count(0));
  app.add_option("--weight-decay", f.weight_decay, "AdamW weight decay")
      ->check(spmd::flags::number(0));
  app.add_option("--grad-clip", f.grad_clip, "global gradient-norm limit (0: none)")
      ->check(spmd::flags::number(0));
  app.add_option("--eval-batches", f.eval_batches, "held-out batches in the final val loss")
      ->check(spmd::flags::count(1));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::exit(app.exit(e));
  }
  return f;
}

// The mean loss over consecutive windows of the held-out text, without a graph.
double val_loss(nn::Transformer& model, const data::TextDataset& ds, const Flags& f) {
  NoGradGuard no_grad;
  model.eval();
  const int64_t T = model.config.max_seq_len;
  const auto batches = ds.eval_batches(data::Split::kVal, f.batch, T, f.eval_batches);
  SPMD_CHECK(!batches.empty(), "the held-out text is shorter than one batch of ", f.batch, " x ",
             T + 1, " tokens");
  double total = 0;
  for (const data::Batch& b : batches) total += cross_entropy(model(b.x), b.y).item<double>();
  model.train();
  return total / double(batches.size());
}

void train(const Flags& f) {
  set_num_threads(f.threads);
  const data::TextDataset ds = data::TextDataset::from_file(f.data);
  nn::TransformerConfig config = nn::TransformerConfig::preset(f.config);
  nn::Transformer model(config, f.seed);
  const int64_t B = f.batch, T = config.max_seq_len;
  check_memory_fits(str_cat("training with --batch ", B, " (config ", f.config, ")"),
                    nn::training_step_bytes_lower_bound(config, model.num_parameters(), B));
  std::printf("config %s: %lld parameters, batch %lld x %lld tokens, %lld train / %lld val bytes\n",
              f.config.c_str(), (long long)model.num_parameters(), (long long)B, (long long)T,
              (long long)ds.size(data::Split::kTrain), (long long)ds.size(data::Split::kVal));

  const std::vector<Tensor> params = model.parameters();
  optim::AdamW opt(params, {.lr = f.lr, .weight_decay = f.weight_decay});
  const optim::WarmupCosine schedule(f.lr, std::min(f.warmup, f.steps), f.steps, f.lr / 10);
  Generator batches(f.seed + 1);
  auto window_start = std::chrono::steady_clock::now();
  int64_t window_tokens = 0;

  for (int64_t step = 0; step < f.steps; ++step) {
    const data::Batch batch = ds.sample(data::Split::kTrain, B, T, batches);
    const Tensor loss = cross_entropy(model(batch.x), batch.y);  // logits (B, T, V)
    opt.zero_grad();
    backward(loss);
    if (f.grad_clip > 0) optim::clip_grad_norm_(params, f.grad_clip);
    opt.set_lr(schedule(step));
    opt.step();

    window_tokens += B * T;
    if (step % f.log_every == 0 || step == f.steps - 1) {
      const auto now = std::chrono::steady_clock::now();
      const double seconds = std::chrono::duration<double>(now - window_start).count();
      std::printf("step %lld loss %.4f tok/s %.0f\n", (long long)step, loss.item<double>(),
                  double(window_tokens) / seconds);
      std::fflush(stdout);
      window_start = now;
      window_tokens = 0;
    }
  }
  std::printf("val loss %.4f\n", val_loss(model, ds, f));
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse_flags(argc, argv);
  try {
    train(flags);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "01_train_single: %s\n", e.what());
    return 1;
  }
  return 0;
}
